def add(a, b):
    return a + b


def clamp(x, low, high):
    return max(low, min(high, x))
