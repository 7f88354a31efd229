"""Ranking benchmark: the tournament scheduler and baselines against simulated judges on TREC data.

Run ``python -m tierank.bench.ranking run`` (or ``calibrate``); see RESULTS.md for the figures.
"""
