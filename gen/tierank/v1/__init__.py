"""Generated from proto/tierank/v1 by scripts/gen_proto.py. Do not edit."""
