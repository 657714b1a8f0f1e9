"""Commands: the efold-controller commands, one module each, each thin (parse, call one
function, map errors to exit codes); each defines `command`, which ``cli`` loads by name.

May import every room of ``controller`` and the packages below it.
"""
