"""Adapters: the only code that talks to clusters, metric stores, DNS and chat. Activities call them.

`base` holds the protocols and the error type; one module per system; `targets` is the file that says which
adapter serves which stage, and `registry` builds the lookup the activities use.
"""
