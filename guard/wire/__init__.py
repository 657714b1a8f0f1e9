"""guard/wire"""
