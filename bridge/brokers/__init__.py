"""Broker sources: base.py is the interface; embedded/ is the in-process broker."""
