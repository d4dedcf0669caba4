"""Worker programs, one per topic, each run by torchrun as ``python -m disttutor.programs.NAME``.

Every program follows one shape: ``main(argv)`` parses arguments into a typed
config, then does its work inside ``with runtime.setup() as ctx`` and sends
results back with ``runtime.report``.
"""
