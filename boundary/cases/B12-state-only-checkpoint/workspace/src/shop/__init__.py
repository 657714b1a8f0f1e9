"""shop: a small cart library."""
