-------------------------- MODULE TraceReplication --------------------------
(***************************************************************************)
(* Theory of operation.                                                    *)
(*                                                                         *)
(* Trace validation of one partition against spec/Replication.tla: is a    *)
(* trace that kref logged (NDJSON, converted by trace_check/ into the      *)
(* constant TraceLog, a sequence of records) a behaviour of the real spec? *)
(*                                                                         *)
(* A cursor `tl` walks TraceLog.  Each step of TraceNext takes the event   *)
(* under the cursor and performs the spec action of the same name on the   *)
(* replica that logged it, constrained by what the event says (the fetch  *)
(* offset sent, the log end offset after an append, the high watermark    *)
(* after an advance, the ISR committed, ...).  What a trace does not show  *)
(* stays free, and TLC searches for it: the values of records, acks modes, *)
(* how many records a fetch response carried (pinned down by the           *)
(* follower's append that follows), what a crash kept.  The controller's   *)
(* commit of an AlterPartition is not logged by the replica that asked, so *)
(* it is a silent step TLC may place anywhere; so is a follower consuming  *)
(* an empty fetch response (kref logs FollowerAppend only when it appended *)
(* something).                                                             *)
(*                                                                         *)
(* TLC checks the invariant TraceIncomplete; a violation means some        *)
(* behaviour of the spec consumed every event: the trace is accepted.      *)
(* No violation means no behaviour can take some event; the state          *)
(* constraint TraceProgress prints how far the deepest behaviour got and   *)
(* its state, which trace_check reports as the first event no action can  *)
(* take and the state before it.                                           *)
(*                                                                         *)
(* Where the code knows more than the spec (documented in                  *)
(* docs/trace-validation.md): kref, like Kafka, answers a follower's fetch *)
(* with the high watermark *after* that fetch advanced it, the spec with   *)
(* the one before; so a follower's high watermark is not compared (the     *)
(* spec's may lag by one fetch round).  Everything else is.                *)
(***************************************************************************)
EXTENDS Replication, TLC

\* Several traces per TLC run (one JVM start for many traces): TraceLogs is
\* a sequence of traces, each << [type |-> "LeaderAppend", replica |-> 1, ...], ... >>;
\* Init picks one (tt) and the behaviour walks it.  With TLC's -continue
\* every trace that some behaviour completes shows up as a violation of
\* TraceIncomplete in a state with that tt.
CONSTANT TraceLogs

VARIABLES
    tt,     \* which trace of TraceLogs this behaviour walks
    tl      \* the cursor: index of the next event to take

trace_vars == <<vars, tt, tl>>

TraceLog == TraceLogs[tt]

Ev == TraceLog[tl]

\* Fresh record values for a batch of n: values are 1..Len(produced), in order.
FreshBatch(n) == [k \in 1..n |-> Cardinality(produced) + k]

TraceInit ==
    /\ Init
    /\ tt \in 1..Len(TraceLogs)
    /\ tl = 1
    /\ TLCSet(1, 1)

-----------------------------------------------------------------------------
(* One matcher per event type: the spec action, constrained by the event. *)

TLeaderAppend ==
    LET r == Ev.replica IN
    /\ leader_epoch[r] = Ev.leader_epoch
    /\ Len(log[r]) = Ev.first_offset
    \* kref's LeaderAppend does not log the produce's acks.  acks only feeds
    \* the ghost variables acks_all/acked, and acks = "1" has the weaker
    \* precondition and the smaller acked (which only weakens Crash's fault
    \* assumption), so a behaviour with some acks choice exists iff one with
    \* "1" does; trying both would double the states per append (2^appends).
    /\ LeaderAppend(r, FreshBatch(Ev.last_offset - Ev.first_offset + 1),
                    IF "acks" \in DOMAIN Ev THEN Ev.acks ELSE "1")
    /\ Len(log'[r]) = Ev.log_end_offset

TAdvanceHighWatermark ==
    LET r == Ev.replica IN
    /\ AdvanceHighWatermark(r)
    /\ high_watermark'[r] = Ev.high_watermark

TLeaderHandleFetch ==
    LET l == Ev.replica
        f == Ev.follower IN
    /\ fetch[f].type = "FetchRequest"
    /\ fetch[f].fetch_offset = Ev.fetch_offset
    /\ fetch[f].last_fetched_epoch = Ev.last_fetched_epoch
    /\ LeaderHandleFetch(l, f)
    /\ IF Ev.diverging_epoch = -1 /\ Ev.diverging_end_offset = -1
       THEN fetch'[f].type = "FetchResponse"
       ELSE /\ fetch'[f].type = "DivergingEpoch"
            /\ fetch'[f].epoch = Ev.diverging_epoch
            /\ fetch'[f].end_offset = Ev.diverging_end_offset

TFollowerFetch ==
    LET f == Ev.replica IN
    /\ FollowerFetch(f)
    /\ fetch'[f].fetch_offset = Ev.fetch_offset
    /\ fetch'[f].last_fetched_epoch = Ev.last_fetched_epoch
    /\ fetch'[f].current_leader_epoch = Ev.leader_epoch

TFetchError ==
    FetchError(Ev.replica)

TFollowerAppend ==
    LET f == Ev.replica IN
    /\ Len(log[f]) = Ev.first_offset
    /\ FollowerAppend(f)
    /\ Len(log'[f]) = Ev.log_end_offset

TTruncateToEpochEndOffset ==
    LET f == Ev.replica IN
    /\ TruncateToEpochEndOffset(f)
    /\ Len(log'[f]) = Ev.log_end_offset

TShrinkIsr ==
    /\ ShrinkIsr(Ev.replica, Ev.removed)
    /\ alter_partition'[Ev.replica].new_isr = Ev.isr

TExpandIsr ==
    /\ ExpandIsr(Ev.replica, Ev.added)
    /\ alter_partition'[Ev.replica].new_isr = Ev.isr

THandleAlterPartitionResponse ==
    LET l == Ev.replica IN
    /\ HandleAlterPartitionResponse(l)
    /\ isr'[l] = Ev.isr
    /\ partition_epoch'[l] = Ev.partition_epoch

TBecomeLeader ==
    LET r == Ev.replica IN
    /\ Len(log[r]) = Ev.log_end_offset
    /\ BecomeLeader(r)
    /\ leader_epoch'[r] = Ev.leader_epoch
    /\ partition_epoch'[r] = Ev.partition_epoch
    /\ isr'[r] = Ev.isr

TBecomeFollower ==
    LET r == Ev.replica IN
    /\ Len(log[r]) = Ev.log_end_offset
    /\ controller.leader = Ev.leader
    /\ BecomeFollower(r)
    /\ leader_epoch'[r] = Ev.leader_epoch
    /\ partition_epoch'[r] = Ev.partition_epoch
    /\ isr'[r] = Ev.isr

\* The controller's elections: the registration it commits must be the one
\* logged (leader, leader epoch, partition epoch, isr).
ElectedAsLogged ==
    /\ controller'.leader = Ev.leader
    /\ controller'.leader_epoch = Ev.leader_epoch
    /\ controller'.partition_epoch = Ev.partition_epoch
    /\ controller'.isr = Ev.isr

TElectLeader == ElectLeader(Ev.leader) /\ ElectedAsLogged
TElectPreferredLeader == ElectPreferredLeader(Ev.leader) /\ ElectedAsLogged
TUncleanElectLeader == UncleanElectLeader(Ev.leader) /\ ElectedAsLogged

TFenceBroker == FenceBroker(Ev.broker)
TUnfenceBroker == UnfenceBroker(Ev.broker)
TCrash == Crash(Ev.replica)
TRestart ==
    /\ Restart(Ev.replica)
    /\ Len(log[Ev.replica]) = Ev.log_end_offset

TraceStep ==
    /\ tl <= Len(TraceLog)
    /\ CASE Ev.type = "LeaderAppend"                 -> TLeaderAppend
         [] Ev.type = "AdvanceHighWatermark"         -> TAdvanceHighWatermark
         [] Ev.type = "LeaderHandleFetch"            -> TLeaderHandleFetch
         [] Ev.type = "FollowerFetch"                -> TFollowerFetch
         [] Ev.type = "FetchError"                   -> TFetchError
         [] Ev.type = "FollowerAppend"               -> TFollowerAppend
         [] Ev.type = "TruncateToEpochEndOffset"     -> TTruncateToEpochEndOffset
         [] Ev.type = "ShrinkIsr"                    -> TShrinkIsr
         [] Ev.type = "ExpandIsr"                    -> TExpandIsr
         [] Ev.type = "HandleAlterPartitionResponse" -> THandleAlterPartitionResponse
         [] Ev.type = "BecomeLeader"                 -> TBecomeLeader
         [] Ev.type = "BecomeFollower"               -> TBecomeFollower
         [] Ev.type = "ElectLeader"                  -> TElectLeader
         [] Ev.type = "ElectPreferredLeader"         -> TElectPreferredLeader
         [] Ev.type = "UncleanElectLeader"           -> TUncleanElectLeader
         [] Ev.type = "FenceBroker"                  -> TFenceBroker
         [] Ev.type = "UnfenceBroker"                -> TUnfenceBroker
         [] Ev.type = "Crash"                        -> TCrash
         [] Ev.type = "Restart"                      -> TRestart
         [] OTHER                                    -> FALSE
    /\ tl' = tl + 1
    /\ tt' = tt

\* Steps the replicas do not log (see the theory of operation).
SilentStep ==
    /\ \/ \E l \in Replicas : CommitAlterPartition(l)
       \/ \E f \in Replicas :
             /\ fetch[f].type = "FetchResponse"
             /\ fetch[f].records = << >>
             /\ FollowerAppend(f)
    /\ UNCHANGED <<tt, tl>>

TraceNext == TraceStep \/ SilentStep

TraceSpec == TraceInit /\ [][TraceNext]_trace_vars

-----------------------------------------------------------------------------
(* What TLC checks.                                                        *)

\* Violated exactly when a behaviour took every event: the trace is accepted.
TraceIncomplete == tl <= Len(TraceLog)

\* A state constraint that is always TRUE; on the way it records (TLC
\* register 1) and prints the deepest cursor reached, with the state there,
\* for the report of a rejected trace.
TraceProgress ==
    IF tl > TLCGet(1)
    THEN /\ TLCSet(1, tl)
         /\ PrintT(<<"kref-trace-reached", tl, tt,
                     [role |-> role,
                      log_end_offset |-> [r \in Replicas |-> Len(log[r])],
                      last_epoch |-> [r \in Replicas |-> LastEpoch(r)],
                      high_watermark |-> high_watermark,
                      leader_epoch |-> leader_epoch,
                      partition_epoch |-> partition_epoch,
                      isr |-> isr,
                      remote_log_end_offset |-> remote_log_end_offset,
                      fetch |-> fetch,
                      alter_partition |-> alter_partition,
                      controller |-> controller]>>)
    ELSE TRUE
=============================================================================
