ACTIVE = [
    "WELCOME-10",
]
