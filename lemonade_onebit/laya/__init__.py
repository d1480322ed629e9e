"""Laya: which kind of answer a request wants (code, prose, short, long_doc), and which device
should serve it."""
