"""The lake side: Delta tables that change rows are applied to, exactly once.

See docs/design/applying.md for its modules and why each is exactly once.
"""
