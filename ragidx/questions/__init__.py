"""What readers asked and how it went: the question log, feedback on answers, gaps and curated answers.

`records` holds the typed records every part shares; `log` stores them in the article store's database, one
tenant apart from another; `redaction` removes personal data before anything is stored.
"""
