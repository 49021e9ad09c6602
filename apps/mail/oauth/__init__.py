"""Mailboxes connected by OAuth: the providers (providers), the provider's endpoints (client), and the tokens an
account holds over time (tokens)."""
