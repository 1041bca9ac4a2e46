"""Leaf utilities every layer may import, importing no other birdjepa package: the command-line
voice (`cli_args`), the one rule for writing output files (`outputs`) and the exceptions
(`errors`)."""
