"""One module per efold-controller command; each defines `command`."""
