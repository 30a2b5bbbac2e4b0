"""The course at /learn: an ordered path through the views, one lesson per view, as data.

Each lesson names the view it runs beside, the URL state that view opens with, a short
narrative, 'try this' links (each a URL state of the same view, with what to look for) and a
check question. Lessons that point at a trace step also name the phase that step shows, so a
test can hold the link to the trace. The page (/learn/{id}) and its JSON twin (/api/learn)
both read this module; nothing here renders HTML. It runs past 400 lines because most of it is
the lessons' text: data, kept in one place so the course reads in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

Params = dict[str, str | int]


@dataclass(frozen=True)
class TryThis:
    """A link that sets the lesson's figure to `params` (its view's URL state)."""

    label: str
    params: Params
    look: str  # what to look for once it loads
    phase: str | None = None  # trace views: the phase the link's step shows


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str  # the feedback shown when this choice is picked


@dataclass(frozen=True)
class Check:
    question: str
    choices: tuple[Choice, ...]
    explanation: str  # shown with every answer, once one is picked


@dataclass(frozen=True)
class Lesson:
    id: str
    title: str
    view: str | None  # the view's path; None: a lesson without a live figure
    narrative: tuple[str, ...]
    check: Check
    start: Params = field(default_factory=dict)  # the figure's URL state when the lesson opens
    try_this: tuple[TryThis, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (path, label): views to explore on their own


def lesson_url(lesson: Lesson, params: Params | None = None) -> str:
    """/learn/{id} with the figure's URL state (the lesson's start by default)."""
    query = urlencode(lesson.start if params is None else params)
    return f"/learn/{lesson.id}" + (f"?{query}" if query else "")


def view_url(lesson: Lesson, params: Params | None = None) -> str | None:
    """The lesson's view on its own page with the same URL state (None without a view)."""
    if lesson.view is None:
        return None
    query = urlencode(lesson.start if params is None else params)
    return lesson.view + (f"?{query}" if query else "")


def as_json(lesson: Lesson, position: int) -> dict[str, Any]:
    """A lesson for GET /api/learn: its data, its place in the course and its URLs."""
    prev_id = LESSONS[position - 1].id if position > 0 else None
    next_id = LESSONS[position + 1].id if position + 1 < len(LESSONS) else None
    return {
        "id": lesson.id,
        "number": position + 1,
        "title": lesson.title,
        "view": lesson.view,
        "url": lesson_url(lesson),
        "view_url": view_url(lesson),
        "start": lesson.start,
        "narrative": list(lesson.narrative),
        "try_this": [
            {
                "label": t.label,
                "params": t.params,
                "look": t.look,
                "phase": t.phase,
                "url": lesson_url(lesson, t.params),
            }
            for t in lesson.try_this
        ],
        "check": {
            "question": lesson.check.question,
            "choices": [
                {"text": c.text, "correct": c.correct, "why": c.why} for c in lesson.check.choices
            ],
            "explanation": lesson.check.explanation,
        },
        "links": [{"path": p, "label": label} for p, label in lesson.links],
        "previous": prev_id,
        "next": next_id,
    }


def lesson_at(lesson_id: str) -> tuple[int, Lesson] | None:
    """The lesson with this id and its position, or None."""
    for k, lesson in enumerate(LESSONS):
        if lesson.id == lesson_id:
            return k, lesson
    return None


TILES_SMALL: Params = {"algo": "fa2", "n": 64, "d": 16, "bm": 16, "bn": 16}
FA1_VS_FA2: Params = {"n": 256, "d": 64, "bm": 64, "bn": 64}
BACKWARD: Params = {"n": 128, "d": 32, "bm": 32, "bn": 32}

LESSONS: tuple[Lesson, ...] = (
    Lesson(
        id="memory-wall",
        title="The memory wall",
        view="/memory-wall",
        start={"n": 1024, "d": 64, "dtype": "fp16", "bm": 128, "bn": 128},
        narrative=(
            "Attention for one head forms the N×N scores S = QKᵀ/√d, turns every row of S into "
            "probabilities P with a softmax, and multiplies P by V. Written the plain way, each "
            "of those three steps is a separate kernel, and one kernel can hand its result to "
            "the next only through HBM, the GPU's large off-chip memory.",
            "So S goes out to HBM and comes back for the softmax, then P goes out and comes back "
            "for the product with V: four trips of N² numbers, against about 4Nd for reading Q, "
            "K, V and writing O. At N = 4096 and d = 64, N² is 64 times Nd. The on-chip SRAM is "
            "an order of magnitude faster, but an H100 has only 228 KiB of it per SM: nowhere "
            "near enough for S.",
            "FlashAttention fuses the three steps into one kernel that works on tiles small "
            "enough for SRAM, so S and P never reach HBM. It pays by reading K and V again for "
            "every block of queries. Step through the figure: naive attention's tiles of S and "
            "P each cross HBM, FlashAttention-2's are used and dropped on chip, and the access "
            "table compares the totals as N grows.",
        ),
        try_this=(
            TryThis(
                "Quadruple N to 4096",
                {"n": 4096, "d": 64, "dtype": "fp16", "bm": 128, "bn": 128},
                "Both totals grow roughly 15-fold: naive through its 4N² term, flash through "
                "re-reading K and V for each of N/128 query blocks. The ratio stays near 4.",
            ),
            TryThis(
                "Larger query blocks: block_m = 256",
                {"n": 1024, "d": 64, "dtype": "fp16", "bm": 256, "bn": 128},
                "Naive traffic does not change; flash re-reads K and V half as often, so its "
                "count drops.",
            ),
            TryThis(
                "A wider head: d = 128",
                {"n": 1024, "d": 128, "dtype": "fp16", "bm": 128, "bn": 128},
                "Flash's re-reads of K and V grow with d while naive's N² matrices do not: the "
                "ratio falls from about 3.8 to 2.",
            ),
        ),
        check=Check(
            question="Why does naive attention move so many more bytes through HBM than "
            "FlashAttention?",
            choices=(
                Choice(
                    "It does more arithmetic.",
                    False,
                    "Both compute the same products and the same softmax; the FLOPs are about "
                    "equal. The difference is data movement.",
                ),
                Choice(
                    "Its three kernels pass the N×N matrices S and P to each other through HBM.",
                    True,
                    "Right: S is written and read back, P is written and read back, and for "
                    "long sequences those N² terms dwarf Q, K, V and O.",
                ),
                Choice(
                    "It reads K and V once per query block.",
                    False,
                    "That is FlashAttention's cost, not naive attention's: naive reads K and V "
                    "once each.",
                ),
                Choice(
                    "It stores its numbers in fp32.",
                    False,
                    "Both sides use the same dtype here; the counts are elements, and the "
                    "bytes follow from them.",
                ),
            ),
            explanation="Traffic, not arithmetic, sets the speed of attention for long "
            "sequences: the N² intermediates are the wall, and keeping them on chip is the whole "
            "point of FlashAttention.",
        ),
    ),
    Lesson(
        id="online-softmax",
        title="The online softmax",
        view="/online-softmax",
        start={"x": "1, 2, 3, 6, 2, 1", "block": 3},
        narrative=(
            "A softmax needs two things before it can write any output: the largest entry of "
            "the row (subtracted so that e^x cannot overflow) and the sum of all the "
            "exponentials. A tile of S holds only part of a row, and a later tile may hold a "
            "larger score, so at first sight the softmax cannot be done tile by tile.",
            "The online softmax reads the row once, block by block, and keeps two numbers: m, "
            "the largest entry so far, and ℓ, the sum of e^(x − m) so far. When a block raises "
            "the maximum from m to m′, every term already in ℓ was taken against the old m and "
            "is too large by the same factor e^(m′ − m). Multiplying ℓ by α = e^(m − m′) fixes "
            "them all at once, without looking at the old entries again.",
            "After the last block, e^(x − m) / ℓ is exactly the softmax. FlashAttention uses "
            "the same α on its running output: the old accumulator shrinks by α, the new "
            "block's contribution is added, and nothing needs a second pass.",
        ),
        try_this=(
            TryThis(
                "A huge value, blocks of 2",
                {"x": "1, 2, 1000, 3, 2, 1", "block": 2},
                "The second block raises m from 2 to 1000 and α = e^(2 − 1000) underflows to "
                "0: the first block's terms vanish, as they should next to e^0 = 1.",
            ),
            TryThis(
                "One block per entry",
                {"x": "3, 1, 4, 1, 5, 9, 2, 6", "block": 1},
                "After the first entry, α drops below 1 exactly when a new maximum arrives (4, 5 "
                "and 9) and is 1 otherwise.",
            ),
            TryThis(
                "Masked entries (−∞)",
                {"x": "-inf, -inf, 2, 0.5, -inf, 1, 3, -inf", "block": 3},
                "Entries at −∞ add e^(−∞) = 0 to ℓ: a causal mask costs the softmax nothing.",
            ),
        ),
        check=Check(
            question="In the first example the running max goes from m = 3 to m′ = 6 when the "
            "second block arrives. What happens to ℓ, the sum over the first block?",
            choices=(
                Choice(
                    "It is multiplied by e^(3 − 6) ≈ 0.0498.",
                    True,
                    "Right: each of its terms was e^(x − 3); against the new max it should be "
                    "e^(x − 6), which is e^(−3) times smaller.",
                ),
                Choice(
                    "It is recomputed from the first block's entries.",
                    False,
                    "That would be a second pass over the data; the rescale makes it unnecessary.",
                ),
                Choice(
                    "Nothing: the sum does not depend on the max.",
                    False,
                    "Each term is e^(x − m), so every term depends on m.",
                ),
                Choice(
                    "It is multiplied by e^(6 − 3) ≈ 20.1.",
                    False,
                    "Wrong direction: the old terms are too large, so the factor must be below 1.",
                ),
            ),
            explanation="α = e^(m − m′) ≤ 1 rescales everything summed so far to the new "
            "maximum; it is exactly 1 when the maximum does not change.",
        ),
    ),
    Lesson(
        id="tiles",
        title="A query block meets the keys",
        view="/tiles",
        start=TILES_SMALL,
        narrative=(
            "FlashAttention-2 gives every block of query rows its own CTA, a thread block on one "
            "SM. The CTA loads its Qᵢ into SRAM once; then K and V stream past in blocks, and "
            "for each block j it forms the score tile S = QᵢKⱼᵀ·scale, which never leaves the "
            "chip.",
            "The softmax step updates each row's running max to m′, computes P = e^(S − m′), "
            "and rescales the running sum and the accumulator by α = e^(m − m′) before adding "
            "rowsum P to ℓ and P·Vⱼ to Õ. Only after the last key block does the CTA divide Õ "
            "by ℓ, write Oᵢ, and store one log-sum-exp per row for the backward pass.",
            "The figure opens on the first tile where a second key block meets the running "
            "max. Step with → and watch the S and P tiles change with each key block, the ℓ "
            "bars split into the rescaled old sum and this tile's share, and the error of the "
            "output so far fall to the rounding floor once every key has been seen.",
        ),
        try_this=(
            TryThis(
                "The accumulator update",
                {**TILES_SMALL, "step": 8},
                "At P·V the old Õ, shrunk row by row by α, plus this tile's P·Vⱼ gives the new "
                "Õ: three heatmaps that add up.",
                phase="pv",
            ),
            TryThis(
                "The last key block",
                {**TILES_SMALL, "step": 16},
                "After the fourth key block the error of Õ/ℓ against exact attention drops "
                "from about 0.3 to fp32 rounding.",
                phase="pv",
            ),
            TryThis(
                "A diagonal tile under the causal mask",
                {**TILES_SMALL, "causal": 1, "step": 12},
                "Keys after their query are masked (grey, −∞ in S); they get P = 0 and add "
                "nothing.",
                phase="qk",
            ),
            TryThis(
                "The same in fp16",
                {**TILES_SMALL, "dtype": "fp16", "step": 17},
                "The output as written, rounded to fp16, sits below the floor u·max|O|: as "
                "exact as fp16 can hold.",
                phase="store",
            ),
        ),
        check=Check(
            question="A new key block raises a row's running max from m to m′. Which numbers "
            "of that row are multiplied by α = e^(m − m′)?",
            choices=(
                Choice(
                    "ℓ and the whole row of the accumulator Õ.",
                    True,
                    "Right: both hold sums of terms taken against the old max, so both shrink "
                    "by α before the new block's terms are added.",
                ),
                Choice(
                    "Only ℓ.",
                    False,
                    "Then Õ would keep terms measured against the old max while ℓ did not, and "
                    "Õ/ℓ would be wrong.",
                ),
                Choice(
                    "The new tile's scores S.",
                    False,
                    "The new scores are exponentiated against m′ directly (P = e^(S − m′)); "
                    "they need no correction.",
                ),
                Choice(
                    "The query block Qᵢ.",
                    False,
                    "Q is an input; it never changes.",
                ),
            ),
            explanation="The running sum and the running output are rescaled together, which "
            "is why Õ/ℓ is the exact attention output of the keys seen so far at every step.",
        ),
    ),
    Lesson(
        id="fa1-vs-fa2",
        title="FA-1 against FA-2: which loop is outside",
        view="/tiles",
        start={**FA1_VS_FA2, "algo": "fa1", "step": 40},
        narrative=(
            "FlashAttention-1 and -2 compute the same tiles with the same online softmax; they "
            "differ in which loop is outside. FA-1 loads a block of K and V once and then "
            "visits every query block that can see it. It leaves each query block between "
            "visits, so that block's O, ℓ and m must wait in HBM: every tile reads them back, "
            "updates them and writes them out again, with O divided by ℓ each time.",
            "FA-2 swaps the loops. A query block stays with one CTA from its first key block to "
            "its last, so its accumulator, m and ℓ never leave the chip, the division by ℓ "
            "happens once, and Oᵢ is written once. Query blocks are independent, so their CTAs "
            "also run in parallel across the SMs, where FA-1 parallelizes over batch and heads "
            "only. FA-2 keeps the log-sum-exp for the backward instead of both m and ℓ.",
            "The figure shows FA-1 filling the grid column by column. The strip beside the grid "
            "counts how often each Oᵢ went to HBM: switch to FA-2 and every count stops at one.",
        ),
        try_this=(
            TryThis(
                "FA-2 on the same problem",
                {**FA1_VS_FA2, "algo": "fa2", "step": 40},
                "The grid fills row by row, and the counters show far fewer elements written "
                "to HBM.",
                phase="pv",
            ),
            TryThis(
                "FA-1 at its last step",
                {**FA1_VS_FA2, "algo": "fa1", "step": 84},
                "The strip reads 5 for every query block: the zeros written at the start, then "
                "one write per key block. FA-2 writes each Oᵢ once.",
                phase="store",
            ),
            TryThis(
                "FA-1 under a causal mask",
                {**FA1_VS_FA2, "algo": "fa1", "causal": 1, "step": 25},
                "Each key block is visited by the query blocks at or below the diagonal only.",
                phase="softmax",
            ),
            TryThis(
                "FA-1 in fp16",
                {**FA1_VS_FA2, "algo": "fa1", "dtype": "fp16", "step": 84},
                "O is rounded to fp16 every time it is written back, so FA-1's error can sit a "
                "little further from the floor than FA-2's single rounding.",
                phase="store",
            ),
        ),
        check=Check(
            question="What does FA-2 gain by putting the query blocks in the outer loop?",
            choices=(
                Choice(
                    "Its running output stays on chip until a single final write, and query "
                    "blocks run in parallel.",
                    True,
                    "Right: no round trips of O, ℓ and m through HBM, and one CTA per query "
                    "block to spread over the SMs.",
                ),
                Choice(
                    "It reads K and V only once in total.",
                    False,
                    "FA-2 reads K and V once per query block; FA-1 is the one that reads them "
                    "once.",
                ),
                Choice(
                    "It computes fewer matrix-product FLOPs.",
                    False,
                    "Both compute the same QKᵀ and P·V products.",
                ),
                Choice(
                    "It no longer needs the online softmax.",
                    False,
                    "Both need it: each query block still meets its keys one block at a time.",
                ),
            ),
            explanation="The loop swap trades FA-1's O traffic (once per tile) for K and V "
            "re-reads (once per query block), which hit in L2 on a real GPU, and gives the GPU "
            "many independent CTAs.",
        ),
    ),
    Lesson(
        id="backward",
        title="The backward pass: recompute, don't store",
        view="/backward",
        start=BACKWARD,
        narrative=(
            "Training needs dQ, dK and dV. Standard attention keeps the N×N matrix P from the "
            "forward pass for this. FlashAttention keeps only O and one log-sum-exp "
            "LSE = m + log ℓ per row, and rebuilds each tile of P when it needs it: S again "
            "from Q and K, then P = e^(S − LSE). The extra matrix product is cheap next to "
            "storing and reading N² numbers.",
            "The FA-2 backward first computes D = rowsum(dO ∘ O) for every row. Then one CTA "
            "per key block j keeps Kⱼ, Vⱼ and its own dKⱼ, dVⱼ on chip and walks the query "
            "blocks: rebuild P, add Pᵀ dO to dV, form dP = dO Vᵀ and dS = P ∘ (dP − D), add "
            "dSᵀ Q to dK and dS K to dQ. dK and dV are written once, at the end.",
            "dQ is the awkward one: every key block contributes to every dQᵢ, and those partial "
            "sums meet in an fp32 accumulator in HBM, read and written at each tile. The "
            "figure counts that traffic apart, and checks all three gradients against float64.",
        ),
        try_this=(
            TryThis(
                "dQ's round trip through HBM",
                {**BACKWARD, "step": 10},
                "The accumulator counter grows: dQᵢ is read, added to and written back in fp32.",
                phase="dq",
            ),
            TryThis(
                "A later visit of key block 0",
                {**BACKWARD, "step": 16},
                "The CTA still holds its dK, dV from the first query block and adds this "
                "block's share.",
                phase="ds",
            ),
            TryThis(
                "Causal and bf16",
                {**BACKWARD, "causal": 1, "dtype": "bf16", "step": 39},
                "A diagonal tile: masked pairs have P = 0, so they add nothing to any gradient.",
                phase="ds",
            ),
        ),
        check=Check(
            question="Where does the FA-2 backward get the probabilities P from?",
            choices=(
                Choice(
                    "It recomputes S from Q and K, then P = e^(S − LSE) with the saved "
                    "log-sum-exp.",
                    True,
                    "Right: one number per row saved in the forward pass is enough to rebuild "
                    "the normalized P exactly.",
                ),
                Choice(
                    "It reads P, which the forward pass wrote to HBM.",
                    False,
                    "The forward never writes P; that is the N² memory FlashAttention avoids.",
                ),
                Choice(
                    "From dO and V.",
                    False,
                    "dO Vᵀ gives dP, the gradient of P, not P itself.",
                ),
                Choice(
                    "It does not need P.",
                    False,
                    "dV = Pᵀ dO and dS = P ∘ (dP − D) both need it.",
                ),
            ),
            explanation="Recomputation turns an O(N²) memory cost into extra arithmetic, "
            "which tensor cores supply cheaply.",
        ),
    ),
    Lesson(
        id="decoding",
        title="Decoding: one query, a long cache",
        view="/decode",
        start={"n": 1, "nk": 4096, "d": 64, "bn": 64, "group": 4, "splits": 8},
        narrative=(
            "Generating text adds one token at a time, and its query (one row per head) "
            "attends to the whole KV cache. FA-2 parallelizes over blocks of queries; with a "
            "single query row there is one block per head, so a small batch launches far fewer "
            "CTAs than the GPU has SMs, each streaming thousands of keys on its own.",
            "Flash-Decoding splits the cache instead. Each split is a CTA that runs the "
            "ordinary online softmax over its share of the keys and writes a partial output Oₛ "
            "with its log-sum-exp LSEₛ. The splits run at the same time, so the stepper goes "
            "round them: a key block of every split, then the next of every split. A small "
            "second kernel merges them: split s enters with weight e^(LSEₛ − LSE), where LSE "
            "combines the mass of every split, and the result is exactly attention over the "
            "whole cache.",
            "With grouped-query attention several query heads share one K/V head; they ride in "
            "the same CTA, so each key and value is read once for all of them.",
        ),
        try_this=(
            TryThis(
                "Two splits",
                {"n": 1, "nk": 4096, "d": 64, "bn": 64, "group": 4, "splits": 2},
                "Fewer, longer splits: less parallelism, a shorter merge.",
            ),
            TryThis(
                "32 splits",
                {"n": 1, "nk": 4096, "d": 64, "bn": 64, "group": 4, "splits": 32},
                "Each split sees two key blocks; the reduce has 32 partials to weigh.",
            ),
            TryThis(
                "No head sharing",
                {"n": 1, "nk": 4096, "d": 64, "bn": 64, "group": 1, "splits": 8},
                "One query row per CTA: the same K and V reads now serve a single head.",
            ),
        ),
        check=Check(
            question="What does the merge need from each split, besides its partial output?",
            choices=(
                Choice(
                    "Its log-sum-exp.",
                    True,
                    "Right: e^(LSEₛ − LSE) is the share of the total softmax mass that split s "
                    "holds, which is its weight in the final output.",
                ),
                Choice(
                    "Its keys, to recompute the scores.",
                    False,
                    "The reduce never touches K or V; the splits already did.",
                ),
                Choice(
                    "Nothing: the partial outputs are averaged.",
                    False,
                    "A plain average would weigh a split of small scores as much as one holding "
                    "the largest.",
                ),
                Choice(
                    "The number of keys in the split.",
                    False,
                    "Counts are not weights: what matters is how much softmax mass the split "
                    "holds.",
                ),
            ),
            explanation="The log-sum-exp is the online softmax's state folded into one number, "
            "which is what lets independent pieces be merged exactly.",
        ),
    ),
    Lesson(
        id="schedule",
        title="The whole GPU: CTAs, waves and the causal tail",
        view="/schedule",
        narrative=(
            "A kernel launch is a grid of CTAs. The GPU places as many on each SM as its shared "
            "memory, registers and warp slots allow, and hands out the rest as CTAs finish. "
            "The default run has 2 × 16 heads × 32 query blocks = 1,024 CTAs on 132 SMs at one "
            "CTA each: about 7.8 waves.",
            "Under a causal mask the CTAs do unequal work: query block i sees about i + 1 key "
            "blocks, so early blocks finish first and the chart of CTA time by block rises "
            "steadily. Near the end SMs fall idle while the last long CTAs finish: the tail.",
            "The timing engine estimates each CTA's time from its FLOPs, exponentials and bytes "
            "at the GPU's rates (calibrated on H100 and H200 measurements), schedules the CTAs "
            "in launch order and charges every microsecond to a limiter. The roofline places "
            "the run against the GPU's peaks.",
        ),
        try_this=(
            TryThis(
                "Without the causal mask",
                {"causal": 0},
                "Every CTA does the same work: the waves line up and the imbalance chart is flat.",
            ),
            TryThis(
                "Smaller query blocks: block_m = 64",
                {"block_m": 64},
                "Twice as many CTAs, each with half the rows; two now fit on an SM, so the waves "
                "stay near 7.8, yet the run takes longer: the limiter chart shows where the "
                "time goes.",
            ),
            TryThis(
                "Half the SMs",
                {"sms": 66},
                "The same work on 66 SMs: twice the waves, and the run takes about twice as long.",
            ),
        ),
        check=Check(
            question="Why do the CTAs of a causal FA-2 forward take different times?",
            choices=(
                Choice(
                    "A query block near the start sees few keys; one near the end sees nearly "
                    "all of them.",
                    True,
                    "Right: the mask skips whole tiles above the diagonal, so work grows with "
                    "the block index.",
                ),
                Choice(
                    "The SMs run at different clocks.",
                    False,
                    "The model, like the GPU, runs every SM at the same clock.",
                ),
                Choice(
                    "Later blocks read Q more often.",
                    False,
                    "Each CTA reads its Q block once.",
                ),
                Choice(
                    "Masked pairs cost extra FLOPs.",
                    False,
                    "Fully masked tiles are skipped; only the tiles the diagonal crosses are "
                    "computed whole.",
                ),
            ),
            explanation="Launching the longest CTAs first, or cutting the work into more even "
            "pieces, is how kernels shorten the causal tail.",
        ),
    ),
    Lesson(
        id="hopper",
        title="FlashAttention-3 on Hopper: warpgroups taking turns",
        view="/hopper",
        start={"head_dim": 128, "consumers": 2, "pingpong": 1, "pipeline": 1},
        narrative=(
            "FlashAttention-3 keeps the tiles, the online softmax and the recomputing backward, "
            "and reorganizes one CTA's work for the H100's Hopper architecture. A loader warp "
            "copies Q, then K and V block by block, into a ring of shared-memory slots with the "
            "TMA; consumer warpgroups of 64 query rows each issue their two products to the "
            "tensor cores as asynchronous wgmma instructions and run the softmax in between.",
            "The softmax is the slow part: its exponentials run on the SFU, which computes some "
            "3.9 tera-exponentials per second on an H100 against nearly 1,000 TFLOP/s of fp16 "
            "products. Ping-pong makes the consumers take turns, so that one's softmax runs "
            "while the other's products keep the tensor cores busy; pipelining lets a "
            "warpgroup issue its next S before its own P·V, so its softmax overlaps its "
            "products too.",
            "The figure runs the FA-3 model of the timing engine above a timeline recorded on "
            "an H100: each phase of each warpgroup stamped with the SM's cycle counter. Step "
            "with → and read what each warpgroup does at the cursor; toggle ping-pong and "
            "pipelining and watch the gaps on the tensor-core rows open and close, and the "
            "time, simulated and measured, change with them.",
        ),
        try_this=(
            TryThis(
                "Without ping-pong or pipelining",
                {"head_dim": 128, "consumers": 2, "pingpong": 0, "pipeline": 0},
                "Each consumer waits for its own softmax before its P·V: green gaps open on the "
                "consumer rows, and the measured time rises from about 0.91 to 1.04 ms.",
            ),
            TryThis(
                "head_dim 64 with three consumers",
                {"head_dim": 64, "consumers": 3, "pingpong": 1, "pipeline": 1},
                "The products are half as long but the exponentials are not: the explanation "
                "panel shows the softmax's units, not the tensor cores, setting the pace.",
            ),
            TryThis(
                "The same on an H200",
                {"gpu": "h200", "head_dim": 128, "consumers": 2, "pingpong": 1, "pipeline": 1},
                "Only the model runs: the measured side says that no timeline was recorded on "
                "this GPU.",
            ),
            TryThis(
                "FP8 as a what-if",
                {"head_dim": 128, "consumers": 2, "dtype": "fp8"},
                "Twice the tensor rate shortens the simulated time; the error table shows what "
                "e4m3 with per-block scales costs in accuracy against fp16 and bf16.",
            ),
        ),
        check=Check(
            question="Why does ping-pong help most when the softmax is long next to the products?",
            choices=(
                Choice(
                    "While one warpgroup runs its softmax, the other's products keep the tensor "
                    "cores busy, so the slow exponentials no longer leave them idle.",
                    True,
                    "Right: the two warpgroups alternate, and each one's softmax hides under "
                    "the other's products.",
                ),
                Choice(
                    "It computes the exponentials on the tensor cores.",
                    False,
                    "The exponentials stay on the SFU; ping-pong only changes when each "
                    "warpgroup uses the tensor cores.",
                ),
                Choice(
                    "It halves the number of exponentials.",
                    False,
                    "Every score still needs its exp2; the work is the same, only its overlap "
                    "changes.",
                ),
                Choice(
                    "It reads K and V from HBM only once per CTA.",
                    False,
                    "That is the loader's job with or without ping-pong; the copies are not "
                    "what ping-pong schedules.",
                ),
            ),
            explanation="FA-3 computes the same exact attention as FA-2; what changes is the "
            "schedule: asynchronous copies, specialized warps and overlapped softmax and "
            "products, which Hopper's asynchronous instructions make possible.",
        ),
    ),
)
