"""Solution to Exercise 7.1 (chapter 7): the 1F1B order of one pipeline rank.

Check it from a notebook or a shell::

    from disttutor.checks.pipeline import check_one_f_one_b
    print(check_one_f_one_b("solutions/ex7_1_one_f_one_b.py"))
"""


def one_f_one_b(rank, p, m):
    """The ("F", i) / ("B", i) actions rank ``rank`` of ``p`` runs for ``m`` micro-batches."""
    # Warm-up: enough forwards to fill the pipe below this rank (fewer if m is small).
    warm = min(m, p - rank)
    order = [("F", i) for i in range(warm)]
    f = warm
    for b in range(m):  # steady state and drain: one backward, then one forward while any are left
        order.append(("B", b))
        if f < m:
            order.append(("F", f))
            f += 1
    return order
