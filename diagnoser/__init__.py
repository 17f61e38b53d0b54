"""diagnoser: explain the gap between a decode-throughput bound and what a server delivers.

The core (models, bound math, trace ingest, engine) imports neither torch nor textual, so
trace analysis and the CLI work on a laptop without a GPU stack.
"""

__version__ = "0.1.0"
