"""Standbys that follow a primary's command log (docs/ha.md): the wire (``wire.py``), the
primary's side of a stream (``feed.py``) and the standby's (``follower.py``)."""
