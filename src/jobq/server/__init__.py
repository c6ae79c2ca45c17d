"""jobq's TCP front end: the workq wire protocol codec and the server that speaks it."""
