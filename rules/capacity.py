"""Work that piles onto one rank or waits for memory or a slot: expert-load imbalance, KV-cache
pressure, and more requests than the scheduler admits.

An EP step lasts as long as its busiest rank, so balanced ranks would each do the mean load;
the MoE time the busiest rank spends above the mean is what balancing can recover. A KV cache
that runs out preempts sequences, which then redo their prefill inside other streams' decode.
Requests beyond what the scheduler runs at once wait in its queue, and that wait is part of their
time to first token, measured by the server as queue time.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    P,
    TEST,
    W,
    Bound,
    Boundaries,
    Budget,
    ConfoundedChange,
    Expectation,
    Finding,
    Grade,
    KernelClass,
    Layout,
    Memory,
    Metrics,
    Platform,
    Routing,
    RuleSet,
    RunDiff,
    Server,
    Traffic,
    ev,
    load_specs,
    rule,
)
from diagnoser.engine.comparison import STREAM_COUNT_SETTINGS
from diagnoser.models.hypothesis import Evidence
from diagnoser.models.serving import SERVER_CLOCKS
from diagnoser.rules.comparison import SLOWER, ablation_finding, as_number, larger
from diagnoser.rules.rates import aggregate_fell, decode_timed

SPECS = load_specs(__file__)

# The share of a device's memory an engine leaves to weights and KV cache (the rest: activations, graph pools,
# the allocator's reserve).
USABLE_SHARE = 0.9

# The busiest EP rank carrying 25 % more tokens than the mean is beyond routing noise at decode batch sizes.
IMBALANCE = 1.25
# A cache over 95 % full with requests queued is out of room, not merely well used.
KV_FULL = 0.95
# Four times the streams in flight, decoded in the same steps, read the weights once for all of them: at a few streams
# each step is still its weights' read, so the aggregate rises nearly fourfold. A rise under a quarter says the
# streams were not in the same steps.
MORE_STREAMS = 4.0
BATCHED_GAIN = 1.25
# The fewer side's streams at most this many: there a step is its weight read on any device that serves decode
# (arithmetic of 2 FLOPs a weight per stream stays far under a GPU's ridge point), so more streams cannot be
# compute-bound yet.
FEW_STREAMS = 8
# Where the KV read is nine tenths of the pinned step, each stream's own bytes are most of the step and more streams
# lengthen it nearly in proportion: from 1 to 4 streams the aggregate stays under BATCHED_GAIN only past that share.
KV_DOMINATES = 0.9
# A request that waits a fifth of its first-token time to be admitted waits on capacity, not on
# the scheduler's next pass: a healthy server queues 0-1 ms of a 40-50 ms first token (under 3 %);
# admission-limited ones queued about 1,640 of 1,689 ms (max_num_seqs 1, 4 streams) and about 285
# of 317 ms (max_num_seqs 4, 8 streams), 90 % and more.
QUEUE_SHARE = 0.2
# Under 5 ms of queueing is a wait for the running step to end, whatever its share of a short first token.
MIN_QUEUE_MS = 5.0
# By Little's law the share of the requests in the system that wait is the share of each request's time spent
# waiting: a tenth is a queue worth naming; a few per cent is one arrival waiting out the running step.
WAITING_SHARE = 0.1
# ... or a whole request waiting on average: the queue is seldom empty, so the server runs at its cap.
SATURATED_QUEUE = 1.0
# The queue time and the figure it is part of, read at the same statistic: means first, then medians;
# the first-token time first, then the whole request's latency.
QUEUE_PAIRS = (
    ("queue_mean_ms", "ttft_mean_ms"),
    ("queue_p50_ms", "ttft_p50_ms"),
    ("queue_mean_ms", "request_latency_mean_ms"),
    ("queue_p50_ms", "request_latency_p50_ms"),
)


def balanced_saving_ms(moe_ms: float, imbalance: float) -> float:
    """MoE time the busiest rank would lose at the mean load: ``T x (1 - mean/max)``."""
    return moe_ms * (1.0 - 1.0 / imbalance)


def queue_pair(m) -> tuple[str, str] | None:
    """The first (queue, whole) pair of Metrics fields the window reported both halves of."""
    return next(((q, whole) for q, whole in QUEUE_PAIRS if q in m and whole in m), None)


def queued(m) -> bool:
    """The measured wait to be admitted is a notable share of the time it is part of."""
    pair = queue_pair(m)
    if pair is None:
        return False
    wait, whole = m[pair[0]], m[pair[1]]
    return wait >= MIN_QUEUE_MS and wait >= QUEUE_SHARE * whole


def waiting_is_a_share(m, waiting: float) -> bool:
    """Requests waited, and (when the requests in the system are known) as a notable share of them."""
    in_system = max(m.get("concurrency") or 0, (m.get("running_sequences") or 0) + waiting)
    return waiting >= SATURATED_QUEUE or (waiting > 0 and (in_system <= waiting or waiting >= WAITING_SHARE * in_system))


def lower_cap_slower(slower: str, faster: str) -> bool:
    """The slower run admitted fewer sequences at once."""
    return larger(faster, slower)


def waits_before_the_engine(client_ttft: float, server_ttft: float) -> bool:
    """The client's first token comes a queue's worth later than the engine's: the same cut-offs as a timed queue."""
    wait = client_ttft - server_ttft
    return wait >= MIN_QUEUE_MS and wait >= QUEUE_SHARE * client_ttft


def queue_not_timed(m) -> bool:
    """No queue share to judge by: no (queue, whole) pair, and no queue figure alone that is under a step's wait."""
    return queue_pair(m) is None and all(m[q] >= MIN_QUEUE_MS for q in ("queue_mean_ms", "queue_p50_ms") if q in m)


def queue_timed(m) -> Finding:
    wait, whole = queue_pair(m)
    return Finding(
        evidence=[ev(f"metrics.{wait}", m[wait], "ms"), ev(f"metrics.{whole}", m[whole], "ms"), *_admission(m)],
        removable_ms=m[wait],
        step_ms=m[whole],
        detail=f"Requests wait {m[wait]:.4g} of {m[whole]:.4g} ms to be admitted: the gain is on the "
        f"{'first-token time' if whole.startswith('ttft') else 'request latency'}, not on the per-token rate.",
    )


def waiting_for_blocks(m, memory: Evidence) -> Finding:
    """The timed queue, read as a wait for KV blocks: its time bounds what freeing the cache gains a first token."""
    queue = queue_timed(m)
    return Finding(evidence=[memory, *queue.evidence], removable_ms=queue.removable_ms, step_ms=queue.step_ms,
                   detail=f"{queue.detail} The scheduler ran out of KV blocks in the window, so they waited for blocks.")


def cache_never_short() -> tuple:
    """No sign the window saw the cache run out: no preemption, never full."""
    return NOT(Memory(preemptions=P(lambda n: n > 0))), NOT(Memory(kv_cache_usage=P(lambda usage: usage >= KV_FULL)))


def slots_not_blocks() -> tuple:
    """No sign the cache ran out of blocks (no preemption, not full, no more requests in flight than it holds whole): a
    timed queue waited for a slot."""
    return (*cache_never_short(), NOT(Memory(requests_beyond_cache=W())))


def first_token_ms(m) -> float | None:
    """The time to first token at the statistic queue times are read at first: the mean, else the median."""
    return m.get("ttft_mean_ms", m.get("ttft_p50_ms"))


def wait_beyond_the_prompt(m) -> float | None:
    """The least a request waited before its prompt ran: its first-token time less the prompt's tokens at the time
    per output token. A prompt's tokens go through the model together, one pass reading the weights once for many of
    them, so its prefill takes less than decoding it one token a step would; the rest of the first token is a wait.
    Only a per-token time that leaves the first token out (TPOT, ITL) bounds it: a rate over whole requests counts
    the wait too. None when a figure is missing or the queue was timed."""
    ttft, prompt = first_token_ms(m), m.get("input_tokens")
    if ttft is None or prompt is None or not decode_timed(m) or not queue_not_timed(m):
        return None
    return ttft - prompt * m["per_token_ms"]


def waited_beyond_the_prompt(m) -> bool:
    """That least wait is a notable share of the first token, by the cut-offs a timed queue is judged by."""
    wait = wait_beyond_the_prompt(m)
    return wait is not None and wait >= MIN_QUEUE_MS and wait >= QUEUE_SHARE * first_token_ms(m)


def admitted_all(m, cap: int) -> bool:
    """Every request in flight fitted under the cap, and the gauges sampled over the load saw none waiting."""
    return m.get("concurrency") is not None and m["concurrency"] <= cap and m.get("waiting_requests") == 0


def _admission(m) -> list:
    return [ev(f"metrics.{n}", m[n]) for n in ("concurrency", "running_sequences", "waiting_requests") if n in m]


def aggregate_gain(d) -> float:
    """The aggregate with more streams over the aggregate with fewer (below 1 where more streams made fewer)."""
    more_is_faster = as_number(d["faster"]) > as_number(d["slower"])
    return d["slowdown"] if more_is_faster else 1 / d["slowdown"]


def stream_counts(d) -> tuple[float, float] | None:
    """(fewer, more) streams of a stream-count A/B, where both sides state a count."""
    counts = as_number(d["before"]), as_number(d["after"])
    return None if None in counts or min(counts) <= 0 else tuple(sorted(counts))


def streams_not_batched(d) -> bool:
    """Runs at MORE_STREAMS times the streams or more, the fewer side at FEW_STREAMS or under, whose aggregate rose by
    less than BATCHED_GAIN, and did not fall beyond noise: run one after another, streams make the same tokens a second
    in all; fewer than that is each step costing more than its streams alone (a kernel path that slows with the batch)."""
    if (counts := stream_counts(d)) is None:
        return False
    few, many = counts
    return few <= FEW_STREAMS and many >= MORE_STREAMS * few and 1 / SLOWER <= aggregate_gain(d) < BATCHED_GAIN


class CapacityRules(RuleSet):
    @rule(
        SPECS["ep-imbalance"],
        AS.r << Routing(imbalance=MATCH.imbalance, ranks=MATCH.ranks),
        AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda imbalance: imbalance >= IMBALANCE),
    )
    def ep_imbalance_measured(self, r, imbalance, ranks, k, share, device):
        return Finding(
            evidence=[ev("routing.imbalance", imbalance), ev("routing.ranks", ranks), ev("kernel_classes[moe].share_of_step", share)],
            removable_ms=balanced_saving_ms(device * share, imbalance),
            detail=f"The busiest of {ranks} EP ranks carries {imbalance:.2f}x the mean load.",
        )

    @rule(
        SPECS["ep-imbalance"],
        Routing(imbalance=MATCH.imbalance, ranks=MATCH.ranks),
        NOT(Budget(device_ms=W())),
        TEST(lambda imbalance: imbalance >= IMBALANCE),
    )
    def ep_imbalance_indicated(self, imbalance, ranks):
        return Finding(
            evidence=[ev("routing.imbalance", imbalance), ev("routing.ranks", ranks)],
            detail=f"The busiest of {ranks} EP ranks carries {imbalance:.2f}x the mean load.",
        )

    @rule(
        SPECS["kv-cache-pressure"],
        Bound(resident_share=MATCH.needed, weights_share=MATCH.weights),
        Layout(batch=MATCH.batch),
        Metrics(),
        TEST(lambda needed, weights, batch: batch > 1 and weights < USABLE_SHARE <= needed),
    )
    def kv_beyond_the_device(self, needed, weights, batch):
        """A run of the pinned work whose KV cache at its context does not fit beside the weights in what an engine
        leaves for it: the sequences cannot all stay resident, so the scheduler preempts and redoes (or queues) some
        while the others decode. With one sequence an engine refuses the request instead. Indicated: the server's
        preemptions and cache usage over the run measure it."""
        return Finding(
            evidence=[ev("bound.resident_share", needed), ev("bound.weights_share", weights), ev("workload.batch", batch)],
            detail=f"Weights and the KV cache of {batch} sequences need {needed:.0%} of the device, the weights alone "
            f"{weights:.0%}: more than the {USABLE_SHARE:.0%} an engine leaves them.",
        )

    @rule(SPECS["kv-cache-pressure"], Memory(preemptions=MATCH.n), TEST(lambda n: n > 0))
    def preempting(self, n):
        return Finding(evidence=[ev("memory.preemptions", n)])

    @rule(
        SPECS["kv-cache-pressure"],
        Memory(kv_cache_usage=MATCH.usage, waiting_requests=MATCH.waiting),
        TEST(lambda usage, waiting: usage >= KV_FULL and waiting > 0),
    )
    def kv_full(self, usage, waiting):
        return Finding(evidence=[ev("memory.kv_cache_usage", usage), ev("memory.waiting_requests", waiting)])

    @rule(
        SPECS["kv-cache-pressure"],
        Memory(kv_cache_usage=MATCH.usage),
        NOT(Memory(waiting_requests=W())),
        Metrics(waiting_requests=MATCH.waiting),
        TEST(lambda usage, waiting: usage >= KV_FULL and waiting > 0),
    )
    def kv_full_server_queue(self, usage, waiting):
        """The server's waiting count (a metrics scrape or a log) beside a full cache: they wait for blocks."""
        return Finding(evidence=[ev("memory.kv_cache_usage", usage), ev("metrics.waiting_requests", waiting)])

    @rule(SPECS["kv-cache-pressure"], AS.m << Metrics(), Memory(preemptions=MATCH.n), TEST(lambda m, n: n > 0 and queued(m)))
    def queued_while_preempting(self, m, n):
        """Requests waited to be admitted in a window where the scheduler preempted: it ran out of KV blocks, so the
        wait is for blocks, not for a sequence slot (the real vLLM with 8 blocks of KV at 16 streams: 24 preemptions,
        5 sequences running under a cap of 256, 1,372 of a 1,408 ms first token queued). The queue time is what the
        full cache costs each request's first token; the redone prefills inside the others' decode come on top."""
        return waiting_for_blocks(m, ev("memory.preemptions", n))

    @rule(
        SPECS["kv-cache-pressure"],
        AS.m << Metrics(),
        Memory(requests_beyond_cache=MATCH.beyond),
        *cache_never_short(),
        TEST(lambda m: queued(m)),
    )
    def queued_beyond_what_the_cache_holds(self, m, beyond):
        """Requests waited to be admitted while more were in flight than the cache holds whole (its tokens over a
        request's prompt and output): each admitted request keeps its blocks until it ends, so the rest wait for blocks,
        whatever the cap on sequences. Read from the cache's size and the load's shape, where the window showed neither a
        preemption nor a full cache (a scrape after the load reads the cache empty)."""
        return waiting_for_blocks(m, ev("memory.requests_beyond_cache", beyond))

    @rule(
        SPECS["kv-cache-pressure"],
        AS.m << Metrics(),
        Memory(kv_cache_usage=MATCH.usage),
        NOT(Memory(preemptions=P(lambda n: n > 0))),
        TEST(lambda m, usage: usage >= KV_FULL and queued(m)),
    )
    def queued_with_the_cache_full(self, m, usage):
        """Requests waited to be admitted with the cache full: the wait is for blocks, whatever the cap."""
        return waiting_for_blocks(m, ev("memory.kv_cache_usage", usage))

    @rule(SPECS["admission-queueing"], AS.m << Metrics(), NOT(Server(max_num_seqs=W())), *slots_not_blocks(), TEST(lambda m: queued(m)))
    def admission_queue_timed(self, m):
        """The wait to be admitted, timed by the server, is a share of the first-token time (or the request) it is part of."""
        return queue_timed(m)

    @rule(
        SPECS["admission-queueing"],
        AS.m << Metrics(),
        Server(max_num_seqs=MATCH.cap),
        *slots_not_blocks(),
        TEST(lambda m, cap: queued(m) and not admitted_all(m, cap)),
    )
    def admission_queue_timed_under_the_cap(self, m, cap):
        """As above, unless every request in flight fitted under the cap and none was seen waiting: then the queue
        time is arrivals waiting out the step that was running when they came, which a long prefill step makes long
        (the real vLLM's long-prompts fault: 30 of a 121 ms first token queued at 4 streams under a cap of 128, beside
        203 ms prefill steps), not admission."""
        return queue_timed(m)

    @rule(
        SPECS["admission-queueing"],
        Metrics(concurrency=MATCH.streams, ttft_mean_ms=MATCH.server_ttft, boundary=P(lambda b: b in SERVER_CLOCKS)),
        Server(max_num_seqs=MATCH.admitted),
        Boundaries(ttft_ms=MATCH.client_ttft),
        TEST(lambda streams, admitted, client_ttft, server_ttft: streams > admitted and waits_before_the_engine(client_ttft, server_ttft)),
    )
    def queued_before_the_engine_clock(self, streams, admitted, client_ttft, server_ttft):
        """Where a request waits depends on the server: in the engine's queue (its queue time counts
        it) or ahead of it, in the API server (no engine figure counts it; measured on the real vLLM:
        a client first token of 388 ms against the engine's 12 ms, queue time 0). The client's first
        token less the engine's is that wait, whichever side of the clock it fell."""
        wait = client_ttft - server_ttft
        return Finding(
            evidence=[ev("boundaries.ttft_ms", client_ttft, "ms"), ev("metrics.ttft_mean_ms", server_ttft, "ms"),
                      ev("metrics.concurrency", streams), ev("server.max_num_seqs", admitted)],
            removable_ms=wait,
            step_ms=client_ttft,
            detail=f"Requests wait {wait:.4g} of their {client_ttft:.4g} ms first token before the engine's clock starts: "
            "the gain is on the first-token time, not on the per-token rate.",
        )

    @rule(
        SPECS["admission-queueing"],
        AS.d << RunDiff(setting=P(lambda s: s in STREAM_COUNT_SETTINGS), figure="output_tokens_per_s"),
        NOT(Platform(device_api="cpu")),
        NOT(Traffic(kv_read_share=P(lambda share: share >= KV_DOMINATES))),
        TEST(lambda d: streams_not_batched(d)),
    )
    def streams_decoded_one_after_another(self, d):
        """More streams in flight gave about the same tokens a second in all. A decode step reads the weights once for
        every sequence in it, so at a few streams four times as many make nearly four times the tokens in a step of
        about the same length; an aggregate that stays flat says they were not in the same steps: the server ran one
        request (or a few) at a time and the rest waited. Not on a CPU, whose matmuls can be compute-bound at a few
        streams, nor where the pinned step is mostly its KV read (KV_DOMINATES): each stream's own cache then lengthens
        the step nearly in proportion, and a flat aggregate is the bytes. Not where another pair of the runs shows the aggregate
        falling with more streams: run one after another, streams never make fewer tokens in all, so that is a kernel
        path that slows with the batch, and a flat pair beside it is the same path."""
        if any(isinstance(f, RunDiff) and aggregate_fell(f) for f in self.facts.values()):
            return None
        few, many = stream_counts(d)
        gain = aggregate_gain(d)
        return Finding(
            evidence=[ev("runs.changed", d["setting"]), ev("runs.fewer_streams", few), ev("runs.more_streams", many),
                      ev("runs.aggregate_gain", gain)],
            detail=f"{many:g} streams made {gain:.3g}x the tokens a second of {few:g}: with the streams decoded in the same "
            f"steps, the weights' read is shared and the aggregate would rise toward {many / few:.3g}x.",
        )

    @rule(
        SPECS["admission-queueing"],
        AS.d << RunDiff(setting="max_num_seqs", slowdown=MATCH.slowdown, slower=MATCH.slower, faster=MATCH.faster),
        TEST(lambda d, slowdown, slower, faster: slowdown >= SLOWER and lower_cap_slower(slower, faster)
             and d.get("in_flight", 0) > as_number(slower)),
    )
    def lower_cap_slower_under_more_load(self, d, slower):
        """Two runs that differ only in the admission cap, with more requests in flight than the lower
        cap admits: the lower cap is slower because requests wait for a slot, and the A/B measured it."""
        return ablation_finding(d, ev("runs.in_flight", d["in_flight"]), ev("runs.lower_cap", slower))

    @rule(
        SPECS["admission-queueing"],
        AS.d << ConfoundedChange(setting="max_num_seqs", slowdown=MATCH.slowdown, slower=MATCH.slower, faster=MATCH.faster),
        TEST(lambda slowdown, slower, faster: slowdown >= SLOWER and lower_cap_slower(slower, faster)),
    )
    def lower_cap_slower_among_changes(self, d, slower):
        """The lower cap is on the slower side of runs that changed other settings too: a suspect, indicated, as every
        setting of a confounded change is; a run that changes only the cap measures it."""
        return ablation_finding(d, ev("runs.lower_cap", slower))

    @rule(
        SPECS["admission-queueing"],
        AS.d << RunDiff(setting="max_num_seqs", slowdown=MATCH.slowdown, slower=MATCH.slower, faster=MATCH.faster),
        NOT(RunDiff(setting="max_num_seqs", in_flight=W())),
        NOT(Metrics(concurrency=W())),
        NOT(Layout(batch=W())),
        TEST(lambda slowdown, slower, faster: slowdown >= SLOWER and lower_cap_slower(slower, faster)),
    )
    def lower_cap_slower_load_unknown(self, d, slower):
        """The lower cap is slower and nothing says how many requests were in flight: admission is what a cap
        does first, but a cap can also cut what else follows it (the graphs captured), so it is indicated until
        the load is known to exceed the lower cap."""
        finding = ablation_finding(d, ev("runs.lower_cap", slower))
        return Finding(evidence=finding.evidence, grade=Grade.indicated,
                       detail="How many requests were in flight is not stated: above the lower cap, they queued for it.")

    @rule(
        SPECS["admission-queueing"],
        AS.m << Metrics(concurrency=MATCH.streams),
        Server(max_num_seqs=MATCH.admitted),
        TEST(lambda m, streams, admitted: streams > admitted and queue_not_timed(m)),
    )
    def more_streams_than_admitted(self, m, streams, admitted):
        """Requests beyond the cap wait to start: their first token comes later, not the gaps between tokens. Where
        both sides of the comparison are times per token (a TPOT against an expected time per token), neither holds
        that wait, so it cannot be what separates them. Nor where the case's runs kept this load in flight under this
        cap on both sides of their A/B: both queued alike, so the queue is not what one has and the other lacks."""
        if decode_timed(m) and any(isinstance(f, Expectation) and f.get("per_token_ms") for f in self.facts.values()):
            return None
        if any(isinstance(f, RunDiff) and f.get("in_flight") == streams and f.get("shared_cap") == admitted
               for f in self.facts.values()):
            return None
        return Finding(
            evidence=[ev("metrics.concurrency", streams), ev("server.max_num_seqs", admitted)],
            detail=f"{streams:g} requests in flight against {admitted} the scheduler runs at once: the rest wait; "
            "the server's queue time would bound it.",
        )

    @rule(SPECS["admission-queueing"], AS.m << Metrics(), TEST(lambda m: waited_beyond_the_prompt(m)))
    def first_token_beyond_its_prompt(self, m):
        """Nobody timed the queue, but the first token took longer than decoding the whole prompt one token a step
        would: what is left waited to be admitted (for a slot or KV blocks), whatever the cap that held it. Indicated:
        the wait is only known to be at least the rest (the prefill took less than its bound), and a gain needs its
        most; the server's queue time bounds it."""
        ttft, wait = first_token_ms(m), wait_beyond_the_prompt(m)
        per_token = next(f"metrics.{n}" for n in ("tpot_mean_ms", "tpot_p50_ms", "itl_mean_ms", "itl_p50_ms") if n in m)
        return Finding(
            evidence=[ev("metrics.ttft_ms", ttft, "ms"), ev("metrics.input_tokens", m["input_tokens"]),
                      ev(per_token, m["per_token_ms"], "ms"), ev("wait_at_least_ms", wait, "ms"), *_admission(m)],
            missing=["metrics.queue_mean_ms"],
            detail=f"A {m['input_tokens']:.4g}-token prompt at {m['per_token_ms']:.3g} ms a token would take {ttft - wait:.4g} ms "
            f"even one token a step; the first token took {ttft:.4g} ms, so requests waited at least {wait:.4g} ms to be "
            "admitted: the gain is on the first-token time, not on the per-token rate.",
        )

    @rule(
        SPECS["admission-queueing"],
        AS.m << Metrics(waiting_requests=MATCH.waiting),
        NOT(Memory(kv_cache_usage=P(lambda usage: usage >= KV_FULL))),
        TEST(lambda m, waiting: waiting_is_a_share(m, waiting) and queue_not_timed(m)),
    )
    def requests_waiting(self, m, waiting):
        """Requests wait for a sequence slot or for KV blocks; with the cache full it is the blocks (kv-cache-pressure).
        A fraction of a request waiting among dozens in flight is an arrival waiting out the running step."""
        return Finding(
            evidence=_admission(m),
            detail=f"Up to {waiting:g} requests waited to be admitted in the window; the server's queue time would bound it.",
        )

