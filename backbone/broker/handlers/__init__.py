"""One handler module per API (or family of APIs); `wiring` builds them all and registers them with the
broker's API table."""
