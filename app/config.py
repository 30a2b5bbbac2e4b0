"""Settings from the environment (prefix FLASHSCOPE_); every request size has a limit here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from flashscope.simulator.timing import compiled

ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Server settings. Each field can be set as FLASHSCOPE_<NAME> in the environment."""

    model_config = SettingsConfigDict(env_prefix="FLASHSCOPE_", frozen=True)

    host: str = Field("127.0.0.1", description="Interface `flashscope serve` binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port `flashscope serve` binds.")

    # Tile stepper (one batch, one head, real numbers).
    max_seq: int = Field(1024, ge=1, description="Largest N (seq_q or seq_k) a trace may have.")
    max_head_dim: int = Field(256, ge=1, description="Largest head_dim a trace may have.")
    min_block: int = Field(2, ge=1, description="Smallest block_m / block_n of a trace.")
    max_block: int = Field(256, ge=1, description="Largest block_m / block_n of a trace.")
    max_trace_events: int = Field(20000, ge=1, description="Most events one trace may have.")
    max_seed: int = Field(2**32 - 1, ge=0, description="Largest random seed.")
    max_events_per_request: int = Field(
        256, ge=1, description="Most events one GET /api/trace returns."
    )
    max_trace_response_bytes: int = Field(
        8_000_000, ge=1000, description="Largest JSON body one GET /api/trace returns."
    )
    o_col_limit: int = Field(
        64, ge=1, description="Columns of O sent per row; wider heads are averaged down."
    )
    max_group: int = Field(16, ge=1, description="Most query heads per K/V head in a trace.")
    max_splits: int = Field(1024, ge=1, description="Most KV splits a decode request may ask.")
    max_decode_cache: int = Field(
        32768, ge=1, description="Largest KV cache (nk) of a decode trace (few query rows)."
    )
    max_decode_rows: int = Field(
        256, ge=1, description="Most query rows (group × N) one decode trace packs per CTA."
    )
    trace_state_bytes: int = Field(
        64 * 2**20, ge=2**20, description="Most bytes of recorded numeric state per trace."
    )
    trace_cache_size: int = Field(
        16, ge=1, description="Traces kept in memory for reuse (shared out among the workers)."
    )
    trace_max_macs: float = Field(
        1.5e9,
        gt=0,
        description="Most multiply-adds (query rows × keys × head_dim) one trace's numerics may "
        "take; a larger request is refused before any work.",
    )

    # The compute pool: worker processes that run the costly part of requests (traces,
    # simulations, schedules, the memory wall, comparisons) off the event loop.
    compute_workers: int = Field(
        2,
        ge=1,
        le=64,
        description="Worker processes for traces, simulations and other costly work.",
    )
    compute_warm: bool = Field(
        True, description="Start the compute workers with the server (else on the first task)."
    )
    compute_memory_mib: int = Field(
        2048, ge=0, description="Address space of one compute worker, MiB (0: no cap)."
    )
    compute_timeout_s: float = Field(
        20.0,
        gt=0,
        description="A compute task running longer is stopped (its worker replaced); HTTP 504.",
    )
    compute_max_pending: int = Field(
        64, ge=1, description="Compute tasks waiting or running at once; beyond, HTTP 503."
    )
    compute_max_pending_per_client: int = Field(
        8,
        ge=1,
        description="Compute tasks one client may have waiting or running at once; beyond, 429.",
    )
    compute_max_pending_per_address: int = Field(
        32,
        ge=1,
        description="Compute tasks one address may have waiting or running at once (clients "
        "without a cookie, or a classroom behind one NAT); beyond, 429.",
    )
    ws_steps_per_s: float = Field(
        60.0, gt=0, description="Sustained step messages per second one /ws/trace socket sends."
    )
    ws_steps_burst: int = Field(120, ge=1, description="Step messages a socket may send at once.")
    # Closed-form traffic (POST /api/traffic): no numerics, so far larger sizes are fine.
    traffic_max_seq: int = Field(2**20, ge=1, description="Largest seq_q / seq_k of a count.")
    traffic_max_batch: int = Field(4096, ge=1, description="Largest batch of a count.")
    traffic_max_heads: int = Field(1024, ge=1, description="Largest number of heads of a count.")
    traffic_max_sms: int = Field(
        1024, ge=1, description="Largest SM count a decode split rule uses."
    )
    ws_max_message_bytes: int = Field(
        4096, ge=64, description="Largest message a client may send on a WebSocket."
    )
    ws_ping_interval_s: float = Field(
        10.0, gt=0, description="`flashscope serve` pings every WebSocket this often (seconds)."
    )
    ws_ping_timeout_s: float = Field(
        10.0, gt=0, description="A WebSocket that leaves a ping unanswered this long is closed."
    )

    # Teaching views: the memory wall, the online-softmax explorer, memory scaling.
    memory_wall_max_seq: int = Field(
        8192, ge=1, description="Largest N of the memory-wall walk (/api/memory-wall `n`)."
    )
    memory_wall_max_steps: int = Field(
        10000, ge=1, description="Most steps one memory-wall walk (naive or flash) may have."
    )
    memory_wall_table_max_seq: int = Field(
        1048576, ge=1, description="Largest N of a row of the memory-wall access table."
    )
    memory_wall_table_max_rows: int = Field(
        16, ge=1, description="Most rows (values of N) of the memory-wall access table."
    )
    online_softmax_max_len: int = Field(
        256, ge=1, description="Most numbers in the online-softmax explorer's vector."
    )
    memory_scaling_max_seq: int = Field(
        4194304, ge=1, description="Largest N of the memory-scaling sweep."
    )
    memory_scaling_max_batch: int = Field(
        4096, ge=1, description="Largest batch of the memory-scaling sweep."
    )
    memory_scaling_max_heads: int = Field(
        1024, ge=1, description="Largest head count of the memory-scaling sweep."
    )

    # Live kernel runs (POST /api/runs).
    runs_executor: str = Field(
        "flashscope.app.runs.jobs:execute", description="module:function that executes one run."
    )
    runs_devices: list[str] = Field(
        default_factory=list, description="Devices to run on; empty: every GPU, else the CPU."
    )
    runs_max_queued: int = Field(8, ge=0, description="Runs waiting beyond this get HTTP 429.")
    runs_max_queued_per_client: int = Field(
        2, ge=1, description="Runs one client (browser identity) may have waiting; beyond: 429."
    )
    runs_max_queued_per_address: int = Field(
        4, ge=1, description="Runs one address may have waiting (clients without a cookie)."
    )
    runs_worker_memory_mib: int = Field(
        4096,
        ge=0,
        description="Memory cap of a run's worker process (address space on the CPU, heap on a "
        "GPU); 0: none.",
    )
    runs_max_interpreter_steps: int = Field(
        512,
        ge=1,
        description="Most tile steps a run's kernels may take in Triton's interpreter (no GPU).",
    )
    runs_max_gpu_tflop: float = Field(
        50.0, gt=0, description="Most TFLOP one call of a run's kernels may do on a GPU."
    )
    runs_max_gpu_memory_mib: int = Field(
        16384, ge=1, description="Most GPU memory a run's tensors may take, in MiB."
    )
    runs_timeout_s: float = Field(300.0, gt=0, description="A run longer than this is killed.")
    runs_unwatched_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="A queued or running run (POST /api/runs) that nobody follows this long (no "
        "progress stream open, no GET of it) is cancelled.",
    )
    runs_cache_size: int = Field(64, ge=1, description="Finished runs kept (cache by request).")
    runs_max_batch: int = Field(64, ge=1, description="Largest batch of a run.")
    runs_max_heads: int = Field(128, ge=1, description="Largest head count of a run.")
    runs_max_seq_gpu: int = Field(32768, ge=1, description="Largest N of a timed run on a GPU.")
    runs_max_seq_trace: int = Field(
        1024, ge=1, description="Largest N of an instrumented (traced) run on a GPU."
    )
    runs_max_seq_cpu: int = Field(
        256, ge=1, description="Largest N of a run in Triton's interpreter (no GPU)."
    )
    runs_max_seq_warpgroups: int = Field(
        16384,
        ge=1,
        description="Largest N of a recorded warpgroup timeline (what warpgroups: /hopper's "
        "live recording, an H100 or H200 only).",
    )
    runs_max_cache_cpu: int = Field(
        4096, ge=1, description="Largest KV cache of a decode run in Triton's interpreter."
    )

    # Timing engine (POST /api/simulate).
    simulate_max_batch: int = Field(1024, ge=1, description="Largest batch a simulation may have.")
    simulate_max_heads: int = Field(
        256, ge=1, description="Largest head count a simulation may have."
    )
    simulate_max_seq: int = Field(
        1_048_576, ge=1, description="Largest seq or seq_k (tokens) a simulation may have."
    )
    simulate_max_head_dim: int = Field(
        256, ge=1, description="Largest head_dim a simulation may have."
    )
    simulate_min_block: int = Field(16, ge=1, description="Smallest block_m / block_n to simulate.")
    simulate_max_block: int = Field(256, ge=1, description="Largest block_m / block_n to simulate.")
    simulate_max_splits: int = Field(
        4096, ge=1, description="Most KV splits of a decode simulation."
    )
    simulate_max_hardware_factor: float = Field(
        64.0, ge=1, description="A custom GPU figure may differ from its preset's by this factor."
    )
    simulate_max_ctas: int = Field(
        524_288, ge=1, description="Most CTAs (all launches together) one simulation may run."
    )
    simulate_max_timeline_ctas: int = Field(
        20000, ge=1, description="Most CTAs of the SM timeline a simulation response carries."
    )
    compare_timeline_ctas: int = Field(
        6000, ge=1, description="Most CTAs of the SM timeline GET /api/compare carries."
    )

    # Kernels compiled on demand (simulator/timing/ondemand.py): a simulation of flashscope's
    # kernels on an H100/H200 preset whose kernel no table holds has it compiled for sm_90a on
    # this machine, in the background, for the next simulation of it.
    compile_on_demand: bool = Field(
        True,
        description="Compile (no GPU) the kernels a simulation meets that no table holds, so "
        "the next simulation takes their registers and spills from the binary.",
    )
    compile_cache_dir: Path = Field(
        compiled.DEFAULT_CACHE,
        description="Where the kernels compiled on demand are kept (one file per kernel).",
    )
    compile_timeout_s: float = Field(
        300.0, gt=0, description="Longest one background compile (a batch of kernels) may run."
    )
    compile_batch: int = Field(4, ge=1, description="Most kernels one background compile takes.")
    compile_max_pending: int = Field(
        32, ge=1, description="Most kernels waiting to be compiled; beyond, the estimate stays."
    )
    compile_max_status_keys: int = Field(
        16, ge=1, description="Most kernels one GET /api/compiled asks about."
    )

    # Request guards (every route): body size and per-client rate limits on costly endpoints.
    max_body_bytes: int = Field(
        65536, ge=1024, description="Largest request body; a larger one gets HTTP 413."
    )
    rate_compute_per_s: float = Field(
        10.0,
        gt=0,
        description="Sustained requests per second per client to trace, traffic, simulate, "
        "schedule, view-twin and compare endpoints (and trace opens on /ws/trace).",
    )
    rate_compute_burst: int = Field(
        60, ge=1, description="Requests a client may make at once to those endpoints."
    )
    rate_runs_per_s: float = Field(
        0.5, gt=0, description="Sustained POST /api/runs per second per client."
    )
    rate_runs_burst: int = Field(10, ge=1, description="POST /api/runs a client may make at once.")
    rate_rooms_per_s: float = Field(
        0.1, gt=0, description="Sustained POST /api/rooms (room creation) per second per client."
    )
    rate_rooms_burst: int = Field(5, ge=1, description="Rooms a client may create at once.")
    rate_per_address_factor: float = Field(
        50.0,
        ge=1,
        description="An address's budget in clients' budgets (a classroom behind one NAT).",
    )
    client_secret: str | None = Field(
        None,
        description="Signs the client-identity cookie; set the same one on every process behind "
        "a load balancer (unset: a random one per process).",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks of reverse proxies whose X-Forwarded-For is believed "
        "(none by default: the TCP peer is the client).",
    )
    rate_max_clients: int = Field(
        10000, ge=1, description="Clients whose rate buckets are remembered (oldest dropped)."
    )
    refusal_hold_s: float = Field(
        1.0,
        ge=0,
        le=30,
        description="A client that asks a costly endpoint again before the Retry-After of its "
        "last refusal is refused again, the answer held back until then but at most this long "
        "(0: answered at once).",
    )

    # Instructor-synced rooms (POST /api/rooms, WS /ws/rooms/{code}).
    redis_url: str | None = Field(
        None,
        description="redis://host:port/db shared by several server processes; "
        "unset: rooms live in this process.",
    )
    rooms_max: int = Field(100, ge=1, description="Most rooms open at once.")
    room_max_clients: int = Field(
        300, ge=1, description="Most connections (lecturer and attendees) in one room."
    )
    room_queue_len: int = Field(
        64, ge=1, description="States queued for one slow attendee before it is disconnected."
    )
    room_max_message_bytes: int = Field(
        4096, ge=256, description="Largest message a room client may send."
    )
    room_max_params: int = Field(32, ge=1, description="Most parameters in a room state.")
    room_max_step: int = Field(10**7, ge=0, description="Largest step number in a room state.")
    room_states_per_s: float = Field(
        30.0, gt=0, description="Sustained states per second one lecturer connection may send."
    )
    room_states_burst: int = Field(60, ge=1, description="States a lecturer may send at once.")
    room_idle_ttl_s: float = Field(
        4 * 3600.0, gt=0, description="A room with no client and no state for this long closes."
    )
    room_unjoined_ttl_s: float = Field(
        600.0,
        gt=0,
        description="A room no attendee has joined closes after this long without a client.",
    )
    rooms_max_per_client: int = Field(
        2, ge=1, description="Most open rooms one client (browser identity) may have created."
    )
    rooms_max_per_address: int = Field(
        4, ge=1, description="Most open rooms the clients of one address may have created."
    )
    room_max_clients_per_address: int | None = Field(
        None,
        ge=1,
        description="Most attendee connections from one address in one room "
        "(unset: max(20, room_max_clients // 4)); the lecturer's connections are not counted.",
    )
    room_driver_seats: int = Field(
        4,
        ge=0,
        description="Connections a full room still admits for holders of its drive token.",
    )
    room_send_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A room client that takes longer than this to take one message is dropped.",
    )
    rate_lookup_per_s: float = Field(
        1.0,
        gt=0,
        description="Sustained room look-ups (GET /api/rooms/{code}, joins) per second per client.",
    )
    rate_lookup_burst: int = Field(20, ge=1, description="Room look-ups a client may make at once.")
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) besides the server's own whose pages may "
        "open rooms and their WebSockets.",
    )

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        from flashscope.app.middleware.origin import parse_origin

        for entry in value:
            parse_origin(entry)  # ValueError names the entry
        return value

    def seats_per_address(self) -> int:
        """Most attendee connections one address may hold in one room."""
        if self.room_max_clients_per_address is not None:
            return self.room_max_clients_per_address
        return max(20, self.room_max_clients // 4)

    templates_dir: Path = Field(ROOT / "templates", description="Jinja2 templates of the pages.")
    static_dir: Path = Field(ROOT / "static", description="CSS, ES modules, vendored Plotly.")
    datasets_dir: Path = Field(
        ROOT / "app" / "data",
        description="Shipped measured datasets (validation, timelines) that the app reads.",
    )


@lru_cache
def get_settings() -> Settings:
    return Settings()
