"""Solution to Exercise 7.2 (chapter 7): the bubble fraction of a measured pipeline run.

Check it from a notebook or a shell::

    from disttutor.checks.pipeline import check_bubble_fraction
    print(check_bubble_fraction("solutions/ex7_2_bubble_fraction.py"))
"""


def bubble_fraction(events):
    """``events[rank]`` = that rank's events ``[kind, mb, stage, start_s, end_s]``, any order.

    The window is shared by all ranks -- the earliest start to the latest end -- because the step
    ends only when the slowest rank is done; each rank's idle time inside it (waiting for a
    neighbour, sending, receiving) is its share of the bubble.
    """
    every = [e for rank_events in events for e in rank_events]
    first = min(e[3] for e in every)
    last = max(e[4] for e in every)
    busy = sum(e[4] - e[3] for e in every)
    return 1.0 - busy / (len(events) * (last - first))
