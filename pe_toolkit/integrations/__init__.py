"""Bridges to other libraries; each lives behind its extra (``pe_toolkit.integrations.hf``: ``hf``)."""
