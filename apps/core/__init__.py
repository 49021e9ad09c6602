"""The small core every layer may import: the kinds, the one domain error, ids and changes. It imports no app."""
