"""folds"""
