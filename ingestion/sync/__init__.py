"""Sources that stay in sync: websites, folders and any LlamaIndex reader, read again on every sync.

A source (:class:`ingestion.sync.config.SourceConfig`, a ``[[sources]]`` table of ``ragidx.toml``) is read by a
:class:`ingestion.sync.base.SourceReader`, whose ``scan`` yields one event per item (fetched, unchanged, failed,
skipped, gone); the runner compares content hashes with what the last sync stored, ingests only what is new or
changed, and deletes what is gone. A failed read never deletes anything.

Example:
    >>> from ingestion.sync.base import Gone
    >>> Gone(key="a.md").key
    'a.md'
"""
