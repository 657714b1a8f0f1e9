"""controller/campaigns"""
