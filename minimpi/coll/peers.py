"""Who talks to whom: the rank arithmetic that trees, rings and folds repeat, written once.

Every function here is a line or two of arithmetic; the algorithms keep their step loops
and their sends and receives in plain sight and ask these only *which rank* is next.

**Relative ranks.** A rooted collective renumbers the ranks so that the root is 0:
``rel = relative(rank, root, p)``, and talks to ``absolute(rel', root, p)``. The schedule is
then the same for every root.

**The binomial tree** over relative ranks 0..p-1 (rooted at 0)::

    p = 8:          0
               /    |    \\
              4     2     1        parent(r) = r without its lowest set bit
             / \\    |              children(r) = r + 2^j for every 2^j below r's lowest
            6   5   3                            set bit (for 0: every 2^j < p)
            |                     subtree(r) = [r, r + lowest set bit of r)
            7

A rank's subtree holds the contiguous relative ranks ``[r, subtree_end(r, p))``: this is
what lets binomial scatter and gather move contiguous runs of blocks. Data flowing *down*
(bcast, scatter, a barrier's release) goes to the children largest subtree first, so the
far leaves start early; data flowing *up* (reduce, gather, a barrier's arrival) comes from
the children smallest first: the nearest finish first.

**The ring**: rank r receives from ``left`` = r-1 and sends to ``right`` = r+1 (mod p).

**The fold** lets power-of-two algorithms (recursive doubling and halving) run on any p:
with ``pof2`` = the largest power of two <= p and ``rem = p - pof2``, the first ``2·rem``
ranks pair up (2i, 2i+1); the even one hands its data to the odd one and sits out, so
``pof2`` ranks remain, numbered 0..pof2-1 ("newranks"), each standing for a *contiguous*
range of real ranks (so reductions keep rank order)::

    p = 6 (pof2 = 4, rem = 2):   real 0 1 | 2 3 | 4 | 5
                                  new  - 0 | - 1 | 2 | 3

**Hosts**: hierarchical algorithms work on two levels, the ranks of each host and one
*leader* per host (the rank that talks to other hosts). Hosts are numbered in order of
their lowest rank; a host's ranks need not be contiguous::

    rank   0 1 2 3 4        host_groups  = [[0, 2, 4], [1, 3]]     (host a, host b)
    host   a b a b a        host_leaders = [0, 1]       (each host's lowest rank)
    local  0 0 1 1 2        host_leaders(root=3) = [0, 3]   (the root leads its host)

A rank's *local* rank is its index in its host's group: the intra-host steps run over
local ranks, the leaders' step over host numbers.
"""
from __future__ import annotations

from typing import Hashable, List, Optional, Sequence, Tuple

#: the rank of each group of an intercommunicator that talks to the other group
GROUP_LEADER = 0


# ============================================================================ relative ranks
def relative(rank: int, root: int, p: int) -> int:
    """``rank`` renumbered so that ``root`` is 0."""
    return (rank - root) % p


def absolute(rel: int, root: int, p: int) -> int:
    """The real rank of relative rank ``rel``."""
    return (rel + root) % p


# ============================================================================ binomial tree
def lowest_bit(rel: int) -> int:
    """The lowest set bit of ``rel`` (0 for 0): the size of a non-root rank's subtree."""
    return rel & -rel


def binomial_parent(rel: int) -> int:
    """The parent of relative rank ``rel`` > 0: ``rel`` without its lowest set bit."""
    return rel - lowest_bit(rel)


def binomial_children(rel: int, p: int) -> List[int]:
    """The children of relative rank ``rel``, largest subtree first: ``rel + 2^j`` for each
    ``2^j`` below ``rel``'s lowest set bit (for the root, below p), those < p."""
    mask = lowest_bit(rel) if rel else 1 << max(0, (p - 1).bit_length())
    children = []
    mask >>= 1
    while mask:
        if rel + mask < p:
            children.append(rel + mask)
        mask >>= 1
    return children


def subtree_end(rel: int, p: int) -> int:
    """The end of ``rel``'s subtree: it holds relative ranks ``[rel, subtree_end(rel, p))``."""
    return min(p, rel + lowest_bit(rel)) if rel else p


# ===================================================================================== ring
def ring_neighbours(rank: int, p: int) -> Tuple[int, int]:
    """``(left, right)``: the rank we receive from and the rank we send to."""
    return (rank - 1) % p, (rank + 1) % p


# ===================================================================================== fold
def fold_power_of_two(rank: int, p: int) -> Tuple[int, int, int]:
    """``(pof2, rem, newrank)``: the largest power of two <= p, ``rem = p - pof2``, and this
    rank's number among the ``pof2`` ranks that remain after the fold (-1: sits out).

    Ranks below ``2*rem``: the odd one of each pair (2i, 2i+1) stays as newrank i and stands
    for both; ranks from ``2*rem`` on are newrank ``rank - rem``.
    """
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if rank < 2 * rem:
        return pof2, rem, (rank // 2 if rank % 2 else -1)
    return pof2, rem, rank - rem


def unfold_rank(newrank: int, rem: int) -> int:
    """The real rank that plays ``newrank`` after the fold."""
    return 2 * newrank + 1 if newrank < rem else newrank + rem


def first_real(newrank: int, rem: int) -> int:
    """The lowest real rank that ``newrank`` stands for."""
    return 2 * newrank if newrank < rem else newrank + rem


# ==================================================================================== hosts
def host_groups(hosts: Sequence[Hashable]) -> List[List[int]]:
    """The ranks of each host, ascending, hosts in order of their lowest rank; ``hosts``
    holds the host of each rank (``Endpoint.hosts``)."""
    groups: dict = {}
    for rank, host in enumerate(hosts):
        groups.setdefault(host, []).append(rank)
    return list(groups.values())      # a dict keeps the order in which hosts first appear


def host_of(rank: int, groups: Sequence[Sequence[int]]) -> int:
    """The number of the host (index in ``groups``) that ``rank`` runs on."""
    return next(h for h, group in enumerate(groups) if rank in group)


def host_leaders(groups: Sequence[Sequence[int]], root: Optional[int] = None) -> List[int]:
    """Each host's leader: its lowest rank - except that the root leads its own host, so a
    rooted collective's data never makes an extra hop inside the root's host."""
    return [root if root is not None and root in group else group[0] for group in groups]
