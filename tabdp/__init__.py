"""tabdp."""
