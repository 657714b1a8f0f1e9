"""corpus/data"""
