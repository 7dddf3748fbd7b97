"""Heterogeneous cloud inventories (ThunderServe): which GPUs hold which replica, in which
phase, and how requests are routed between them; what to rent; re-planning after a node
loss or a change of the request mix.

`load_inventory(spec, catalog)` reads an inventory TOML (or a shipped example's name);
`plan_cloud(...)` answers the question as the JSON of `provision cloud --json`;
`replica_cells(replica)`, `replan_rows(answer)` and `replan_changes(answer)` put it in
words (the CLI's tables, the HTML report).

Modules, from the inventory up: `_inventory` (the TOML), `_physics` (a replica group's
latency coefficients, KV budget and links, GPU by GPU), `_score` (each replica's and pair's
analytic rate), `_holding` (which requests each pair holds: routing classes), `_routing`
(the routing LPs), `_admission` and `_steady` (the decode admission limit; steady-state
load), `_bound` (the LP upper bound), `_search` (tabu and exhaustive search), `_plan` (one
search and its context), `_simulate` (a plan through either engine), `_answer` (the whole
question: finalists, the non-split comparisons, renting, re-planning) and `_format` (plans
in words).
"""

from ._admission import KV_UNITS, KvAdmission
from ._answer import (COMPARISON_CHUNK_TOKENS, FINALISTS, RENTAL_SEARCH_STEPS, TARGET_ATTAINMENT, best_by_des,
                      best_chunked_non_split, best_of_budgets, check_question, check_without, chunked_non_split_by_budget,
                      finalist_plans, meets_target, plan_cloud, sustained_rps)
from ._bound import upper_bound_rps
from ._format import (REPLAN_CASES, REPLAN_METRICS, REPLICA_COLUMNS, checks_text, gpus_text, layers_text,
                      load_text, nodes_text, prompts_text, rented_text, replan_changes, replan_event, replan_rows,
                      replica_cells, tp_text)
from ._inventory import SHIPPED, Inventory, NodeType, load_inventory
from ._physics import Physics, split_layers
from ._plan import (DEFAULT_SLO_SCALE, check_cloud_scheduler, make_context, node_local_starts, plan_routing,
                    replicas_json, search_plan, size_sample)
from ._routing import Routing
from ._score import Scorer, SharedRates, Workload
from ._search import MAX_GROUPS, canon, exhaustive, initial_plan, neighbours, score, symmetry_key, tabu_search
from ._simulate import plan_load, server_plan, shared_links, simulate_plan
from ._steady import steady_state_load

__all__ = ["COMPARISON_CHUNK_TOKENS", "FINALISTS", "RENTAL_SEARCH_STEPS", "load_inventory", "Inventory", "NodeType",
           "SHIPPED", "plan_cloud", "check_question", "check_without", "TARGET_ATTAINMENT", "sustained_rps", "best_by_des",
           "best_chunked_non_split", "best_of_budgets", "chunked_non_split_by_budget", "finalist_plans",
           "Physics", "split_layers", "make_context", "size_sample", "search_plan", "plan_routing", "replicas_json",
           "DEFAULT_SLO_SCALE", "Scorer", "SharedRates", "Workload", "Routing", "exhaustive", "tabu_search",
           "initial_plan", "MAX_GROUPS",
           "neighbours", "score", "symmetry_key", "canon", "upper_bound_rps", "simulate_plan", "server_plan",
           "shared_links", "REPLICA_COLUMNS", "REPLAN_CASES", "gpus_text", "nodes_text", "layers_text", "tp_text",
           "replica_cells", "replan_changes", "replan_event", "replan_rows", "REPLAN_METRICS", "rented_text",
           "prompts_text", "checks_text", "KvAdmission", "KV_UNITS", "plan_load", "steady_state_load", "load_text",
           "meets_target", "node_local_starts", "check_cloud_scheduler"]
