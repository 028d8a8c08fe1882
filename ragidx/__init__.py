"""ragidx: a LlamaIndex query engine over knowledge bases."""

__version__ = "0.1.0"
