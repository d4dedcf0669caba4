def find_straggler(traces):
    """The rank that spends the longest in its own forward regions.

    Every rank waits for the slowest one inside backward (DDP's all-reduce needs all ranks), so
    'longest backward' points at the ranks that *waited*; the straggler is the one whose own
    work, before any communication, took longest.
    """
    def forward_us(events):
        return sum(e["dur"] for e in events if e.get("name") == "forward" and e.get("cat") == "user_annotation")

    return max(traces, key=lambda r: forward_us(traces[r]))
