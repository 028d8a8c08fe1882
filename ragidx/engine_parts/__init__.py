"""The jobs :class:`ragidx.engine.Engine` is made of, one module each, so each can be read in one sitting.

``stores`` (the embedding model and the two stores, ingest and delete), ``retrieval`` (the article chain, its
tuning, the flash reranker), ``agents`` (agents by scope, their prompts, guards and budget) and ``sessions`` (who
owns a conversation, a question's turn at the model). ``Engine`` builds them and delegates to them; programs use
``Engine``, not these parts.
"""
