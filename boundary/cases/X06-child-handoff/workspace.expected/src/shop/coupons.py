ACTIVE = [
    "SUMMER-15",
]
