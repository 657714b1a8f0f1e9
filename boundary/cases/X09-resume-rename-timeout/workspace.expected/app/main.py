from app import config


def wait():
    return config.TIMEOUT_SECONDS
