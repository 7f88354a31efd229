"""The definition of relevance used when a job gives no rubric of its own.

One owner for both sides: the server renders it into prompts for a job whose rubric is empty,
and the command line shows it in `--help`.
"""

DEFAULT_RUBRIC = (
    "A passage is relevant when it directly answers the query or gives information needed to"
    " answer it. Prefer passages that answer the query completely and specifically over passages"
    " that are only on the same topic; a passage that does not address the query is not"
    " relevant, however well written."
)
