"""Bundled campaigns (package data)."""
