"""Waits to be interrupted and says how: a SIGINT (Ctrl-C, kill -INT) or
_thread.interrupt_main must raise KeyboardInterrupt exactly once, as in a
bare run, which needs SIGINT at its default disposition when Python starts.

usage: interrupt.py signal|interrupt_main
"""
import _thread
import sys
import threading
import time

if sys.argv[1] == "interrupt_main":
    threading.Timer(0.2, _thread.interrupt_main).start()
try:
    print("ready", flush=True)
    for _ in range(1000):  # short sleeps: interrupt_main does not end a sleep
        time.sleep(0.01)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    time.sleep(0.5)  # a second SIGINT (one relayed twice) would raise here
    print("handled", flush=True)
