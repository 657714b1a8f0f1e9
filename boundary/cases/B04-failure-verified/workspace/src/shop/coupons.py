ACTIVE = [
    "WELCOME-10",
    "Summer-15",
]
