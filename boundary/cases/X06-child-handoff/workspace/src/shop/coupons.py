ACTIVE = [
    "WELCOME-10",
    "SUMMER-15",
]
