-------------------------- MODULE TraceReplication --------------------------
(***************************************************************************)
(* Theory of operation.                                                    *)
(*                                                                         *)
(* Trace validation of one partition against spec/Replication.tla: is a    *)
(* trace that kref logged (NDJSON, converted by trace_check/ into the      *)
(* sequence TraceLog of records) a behaviour of the real spec?          *)
(*                                                                         *)
(* A cursor `tl` walks TraceLog.  Each step of TraceNext takes the event   *)
(* under the cursor and performs the spec action of the same name on the   *)
(* replica that logged it, constrained by what the event says (the fetch  *)
(* offset sent, the log end offset after an append, the high watermark    *)
(* after an advance, the ISR committed, ...).  What a trace does not show  *)
(* stays free, and TLC searches for it: the values of records,            *)
(* how many records a fetch response carried (pinned down by the           *)
(* follower's append that follows), what a crash kept.  The controller's   *)
(* commit of an AlterPartition is not logged by the replica that asked, so *)
(* it is a silent step TLC may place anywhere; so is a follower consuming  *)
(* an empty fetch response (kref logs FollowerAppend only when it appended *)
(* something).                                                             *)
(*                                                                         *)
(* Many traces are checked in one TLC run (a JVM start costs more than   *)
(* checking a trace): TraceLogs holds them all, and TraceInit chooses the  *)
(* one a behaviour follows (ti).  TLC explores the behaviours that follow  *)
(* each trace; the state constraint TraceProgress prints                   *)
(* "kref-trace-accepted" for a trace as soon as one of them has taken     *)
(* every event, and stops TLC when every trace is accepted.  A search     *)
(* that ends without it for a trace means no behaviour takes all of its   *)
(* events; TraceProgress printed how far the deepest got (trace_check     *)
(* then reports that event, and the state before it by checking the      *)
(* prefix up to it).                                                       *)
(*                                                                         *)
(* Where the code knows more than the spec (documented in                  *)
(* docs/trace-validation.md): kref, like Kafka, answers a follower's fetch *)
(* with the high watermark *after* that fetch advanced it, the spec with   *)
(* the one before; so a follower's high watermark is not compared (the     *)
(* spec's may lag by one fetch round).  Everything else is.                *)
(***************************************************************************)
EXTENDS Replication, TLC

CONSTANT TraceLogs  \* the traces of a batch: << << [type |-> "LeaderAppend", replica |-> 1, ...], ... >>, ... >>
CONSTANT TraceShowState  \* indices of the traces whose last spec state is printed when accepted

VARIABLE ti         \* which trace of the batch this behaviour follows (chosen in TraceInit)
VARIABLE tl         \* the cursor: index of the next event of that trace to take
VARIABLE pe_shift   \* spec partition epoch - kref's (see ElectionShift)

trace_vars == <<vars, ti, tl, pe_shift>>

\* A zero-arity constant definition: TLC evaluates it once, at its start.
\* Read through the CONSTANT itself, the generated module's literal (which
\* the .cfg substitutes for it) would be built again at every use.
Traces == TraceLogs

TraceLog == Traces[ti]
Ev == TraceLog[tl]

\* The partition-epoch shift of the event (see ElectionShift).  A replica may
\* log a registration older than the latest shift: a fenced leader still up
\* (LiveBrokerFencing) acts on the partition epoch it had; trace_check then
\* gives the event its own shift (`pe_shift`: the after_fence elections up
\* to that partition epoch).
Shift == IF "pe_shift" \in DOMAIN Ev THEN Ev.pe_shift ELSE pe_shift

\* Fresh record values for a batch of n: values are 1..Len(produced), in order.
FreshBatch(n) == [k \in 1..n |-> Cardinality(produced) + k]

TraceInit ==
    /\ Init
    /\ ti \in DOMAIN Traces
    \* Reassignment: the partition starts on the replicas its creation names
    \* (trace_check's synthetic creation carries them; see TReplicaSetsAtCreation).
    /\ controller.replicas = IF "replicas" \in DOMAIN Traces[ti][1]
                             THEN Range(Traces[ti][1].replicas) ELSE Replicas
    /\ tl = 1
    /\ pe_shift = 0
    /\ TLCSet(1 + ti, 1)  \* see TraceProgress
    /\ TLCSet(1, 0)

-----------------------------------------------------------------------------
(* One matcher per event type: the spec action, constrained by the event. *)

TLeaderAppend ==
    LET r == Ev.replica IN
    /\ leader_epoch[r] = Ev.leader_epoch
    /\ Len(log[r]) = Ev.first_offset
    \* A LeaderAppend event need not log the produce's acks; it only feeds
    \* the ghost variables of the properties, and leaving it free would
    \* double the states per append. Without it, acks = "1": its
    \* precondition is the weaker one (no min.insync.replicas check).
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
    /\ "broker_epoch" \in DOMAIN Ev => fetch[f].broker_epoch = Ev.broker_epoch
    /\ LeaderHandleFetch(l, f)
    /\ IF fetch'[f].type = "None" THEN TRUE  \* f crashed after sending it: no answer
       ELSE IF Ev.diverging_epoch = -1 /\ Ev.diverging_end_offset = -1
       THEN /\ fetch'[f].type = "FetchResponse"
            \* How many records the answer carried, when the trace shows it
            \* (the follower's next append, or none when it fetched again).
            \* Bounded by what the leader has: a follower appending more is
            \* then rejected at its own FollowerAppend, where the fault is.
            /\ "records" \in DOMAIN Ev =>
                  Len(fetch'[f].records) = Min2(Ev.records, Len(log[l]) - Ev.fetch_offset)
       ELSE /\ fetch'[f].type = "DivergingEpoch"
            /\ \/ /\ fetch'[f].epoch = Ev.diverging_epoch
                  /\ fetch'[f].end_offset = Ev.diverging_end_offset
               \* A last fetched epoch older than every epoch the leader knows:
               \* the spec answers as Kafka does, that epoch and the start of
               \* the leader's earliest one (0 here); kref's replica core may
               \* refuse it with OFFSET_OUT_OF_RANGE, logged as epoch -1 and
               \* end offset 0 (session 8). The follower has that epoch (its
               \* last), so it truncates to 0 either way: the same step.
               \/ /\ fetch'[f].epoch = Ev.last_fetched_epoch
                  /\ fetch'[f].end_offset = 0
                  /\ Ev.diverging_epoch = -1
                  /\ Ev.diverging_end_offset = 0

TFollowerFetch ==
    LET f == Ev.replica IN
    /\ FollowerFetch(f)
    /\ fetch'[f].fetch_offset = Ev.fetch_offset
    /\ fetch'[f].last_fetched_epoch = Ev.last_fetched_epoch
    /\ fetch'[f].current_leader_epoch = Ev.leader_epoch
    /\ "broker_epoch" \in DOMAIN Ev => fetch'[f].broker_epoch = Ev.broker_epoch

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
    /\ "broker_epoch" \in DOMAIN Ev =>
          alter_partition'[Ev.replica].broker_epochs[Ev.added] = Ev.broker_epoch

\* An answer that is no controller's decision (NOT_CONTROLLER, a timeout:
\* trace_check marks it `lost`): the leader keeps its proposal and sends it
\* again.  Either the controller had answered and the answer was lost (the
\* spec's AlterPartitionLost), or the request itself never got there and
\* the resend is the same request (no spec step changes anything).
THandleAlterPartitionResponse ==
    LET l == Ev.replica IN
    /\ IF "lost" \in DOMAIN Ev
       THEN \/ AlterPartitionLost(l)
            \/ /\ alter_partition[l].type = "AlterPartitionRequest"
               /\ UNCHANGED vars
       ELSE HandleAlterPartitionResponse(l)
    /\ isr'[l] = Ev.isr
    /\ partition_epoch'[l] = Ev.partition_epoch + Shift

TBecomeLeader ==
    LET r == Ev.replica IN
    /\ "log_end_offset" \in DOMAIN Ev => Len(log[r]) = Ev.log_end_offset
    /\ BecomeLeader(r)
    /\ leader_epoch'[r] = Ev.leader_epoch
    \* (trace_check infers an isr-only BecomeLeader that kref does not log,
    \* marked same_term, with only what the next event of the leader shows)
    /\ "partition_epoch" \in DOMAIN Ev => partition_epoch'[r] = Ev.partition_epoch + Shift
    /\ "same_term" \in DOMAIN Ev => role[r] = "Leader" /\ leader_epoch[r] = Ev.leader_epoch
    /\ isr'[r] = Ev.isr

\* A follower applying a registration with the same leader and leader epoch
\* (an ISR change: a new partition epoch only). Kafka and kref log it; the
\* spec's follower does not track the ISR (its fetching goes on unchanged),
\* so it is no step of the spec: the registration must be one the
\* controller committed, nothing else changes.
TFollowerMetadata ==
    LET r == Ev.replica IN
    /\ role[r] = "Follower"
    /\ leader_epoch[r] = Ev.leader_epoch
    /\ Len(log[r]) = Ev.log_end_offset
    /\ Ev.partition_epoch + Shift <= controller.partition_epoch
    /\ UNCHANGED vars

TBecomeFollower ==
    IF "same_leader" \in DOMAIN Ev THEN TFollowerMetadata ELSE
    LET r == Ev.replica IN
    /\ Len(log[r]) = Ev.log_end_offset
    \* (the spec's follower does not record whom it follows: the leader
    \* logged is compared with the registration applied)
    /\ \E g \in Applicable(r) : g.leader = Ev.leader /\ BecomeFollowerTo(r, g)
    /\ leader_epoch'[r] = Ev.leader_epoch
    \* A broker catching up on the metadata log (after a restart) may apply
    \* a registration older than the controller's latest of the same term
    \* (leader and leader epoch: both compared above), differing in the isr
    \* only. The spec's step applies the latest: no follower action reads
    \* a follower's isr or partition epoch, so the two are the same step.
    /\ \/ /\ partition_epoch'[r] = Ev.partition_epoch + Shift
          /\ isr'[r] = Ev.isr
       \/ Ev.partition_epoch + Shift < controller.partition_epoch

\* kref, like Kafka, fences a leader and elects its successor in one
\* PartitionChangeRecord: one new partition epoch. The spec takes two steps
\* (FenceBroker, then ElectLeader), two partition epochs. trace_check marks
\* such an election "after_fence"; from then on the spec's partition epochs
\* are one ahead of kref's, which pe_shift counts: every partition epoch
\* logged is compared as Ev.partition_epoch + pe_shift.
ElectionShift == IF "after_fence" \in DOMAIN Ev THEN 1 ELSE 0

\* The controller's elections: the registration it commits must be the one
\* logged (leader, leader epoch, partition epoch, isr).
ElectedAsLogged ==
    /\ controller'.leader = Ev.leader
    /\ controller'.leader_epoch = Ev.leader_epoch
    /\ controller'.partition_epoch = Ev.partition_epoch + pe_shift + ElectionShift
    /\ controller'.isr = Ev.isr

TElectLeader == ElectLeader(Ev.leader) /\ ElectedAsLogged
TElectPreferredLeader == ElectPreferredLeader(Ev.leader) /\ ElectedAsLogged
TUncleanElectLeader == UncleanElectLeader(Ev.leader) /\ ElectedAsLogged

\* Real runs fence brokers that are up (a pause, a cut link): trace
\* validation checks against the spec with Replication's LiveBrokerFencing
\* on (TraceRun.cfg: `LiveBrokerFencing <- TLiveBrokerFencing`).
TLiveBrokerFencing == TRUE
\* Real brokers apply the committed registrations one at a time, behind
\* the controller (a broker catching up after its controller wrote several
\* changes in a row: session 10's fault seeds 503 and 504), so trace
\* validation turns on Replication's LaggingMetadata (TraceRun.cfg:
\* `LaggingMetadata <- TLaggingMetadata`).
TLaggingMetadata == TRUE
\* A follower's fetch request stays on the wire across its BecomeLeader or
\* BecomeFollower, and its old leader may take it late (session 11's fault
\* seed 501: a paused zombie did): Replication's LateFetchRequests
\* (TraceRun.cfg: `LateFetchRequests <- TLateFetchRequests`).
TLateFetchRequests == TRUE
\* KIP-903 broker epochs, wherever kref logs one (trace_check numbers them
\* as the spec does: 0 for the incarnation registered when the partition
\* began, one more per registration of that broker since): the fencing and
\* unfencing are of the controller's current registration, a fetch carries
\* its sender's, and an ISR expansion the one of the fetch that justified it.
BrokerEpochAsLogged(b) ==
    "broker_epoch" \in DOMAIN Ev => controller.broker_epoch[b] = Ev.broker_epoch
TFenceBroker == FenceBroker(Ev.broker) /\ BrokerEpochAsLogged(Ev.broker)
\* ---- controlled shutdown (session 12) ----
\* Every process test ends with SIGTERMs, and a SIGTERM may land while a
\* partition is being created: Replication's ControlledShutdowns
\* (TraceRun.cfg: `ControlledShutdowns <- TControlledShutdowns`). The
\* controller's ControlledShutdown event is the spec's step of that name.
TControlledShutdowns == TRUE
TControlledShutdown == ControlledShutdown(Ev.broker) /\ BrokerEpochAsLogged(Ev.broker)
TUnfenceBroker == UnfenceBroker(Ev.broker) /\ BrokerEpochAsLogged(Ev.broker)
\* What the crash kept, when trace_check could tell (docs/trace-validation.md):
\* the log end offset and high watermark the replica had when it came back,
\* or everything for a replica that never came back (keep_all).
TCrash ==
    LET r == Ev.replica IN
    /\ Crash(r)
    /\ "kept_log_end_offset" \in DOMAIN Ev => Len(log'[r]) = Ev.kept_log_end_offset
    /\ "kept_high_watermark" \in DOMAIN Ev => high_watermark'[r] = Ev.kept_high_watermark
    /\ "keep_all" \in DOMAIN Ev => /\ log'[r] = log[r]
                                  /\ high_watermark'[r] = high_watermark[r]
\* The same choices, made inside the spec's Crash: TraceRun.cfg replaces the
\* spec's hook CrashKeeps (TRUE) by this, so TLC builds the one successor
\* the trace shows instead of one per kept prefix and checkpoint (n*n/2 for
\* a log of n records), all but one then dropped by TCrash. The states TCrash
\* admits are the same either way (Len(Prefix(log, keep)) = keep).
TCrashKeeps(r, keep, checkpoint) ==
    /\ "kept_log_end_offset" \in DOMAIN Ev => keep = Ev.kept_log_end_offset
    /\ "kept_high_watermark" \in DOMAIN Ev => checkpoint = Ev.kept_high_watermark
    /\ "keep_all" \in DOMAIN Ev => /\ keep = Len(log[r])
                                  /\ checkpoint = high_watermark[r]
\* A Restart trace_check inferred from a new run of a killed broker's file
\* carries no log end offset: what the crash kept shows in the broker's
\* next event (BecomeFollower, BecomeLeader), which is compared.
TRestart ==
    /\ Restart(Ev.replica)
    /\ "log_end_offset" \in DOMAIN Ev => Len(log[Ev.replica]) = Ev.log_end_offset

-----------------------------------------------------------------------------
(* Partition reassignment (KIP-455): the controller's records as logged    *)
(* (kref/trace/reassignment_events.py), the broker's StopReplica.          *)

\* Real runs move partitions: Replication's ReassignmentEnable is on
\* (TraceRun.cfg: `ReassignmentEnable <- TReassignmentEnable`), and a
\* partition may be created on any replica set (TraceInit picks the one
\* the trace names: `ReplicaSetsAtCreation <- TReplicaSetsAtCreation`).
TReassignmentEnable == TRUE
TReplicaSetsAtCreation == SUBSET Replicas \ {{}}

\* The registration the controller commits is the one logged.
ReassignedAsLogged ==
    /\ controller'.leader = Ev.leader
    /\ controller'.leader_epoch = Ev.leader_epoch
    /\ controller'.partition_epoch = Ev.partition_epoch + pe_shift
    /\ controller'.isr = Ev.isr
    /\ controller'.replicas = Range(Ev.replicas)
    /\ controller'.adding = Range(Ev.adding)
    /\ controller'.removing = Range(Ev.removing)

TAlterPartitionReassignments ==
    AlterPartitionReassignments(Range(Ev.replicas) \ Range(Ev.removing)) /\ ReassignedAsLogged
TCancelPartitionReassignment == CancelPartitionReassignment /\ ReassignedAsLogged
\* kref logs the commit of the AlterPartition that completes a move (the
\* spec's CommitAlterPartition of the leader that sent it); every other
\* commit is silent (SilentStep), and never completes one.
TCompleteReassignment ==
    /\ \E l \in Replicas : CommitAlterPartition(l)
    /\ Reassigning(controller) /\ ~Reassigning(controller')
    /\ ReassignedAsLogged
TStopReplica ==
    LET r == Ev.replica IN
    /\ Len(log[r]) = Ev.log_end_offset
    /\ \E g \in Applicable(r) : /\ g.leader_epoch = Ev.leader_epoch
                                /\ g.partition_epoch = Ev.partition_epoch + Shift
                                /\ StopReplicaTo(r, g)

-----------------------------------------------------------------------------
(* unclean.leader.election.enable at runtime (session 13)                  *)

\* Operators switch it while the cluster runs (test_cluster_configs' unclean
\* tests): Replication's UncleanLeaderElectionDynamic is on (TraceRun.cfg:
\* `UncleanLeaderElectionDynamic <- TUncleanLeaderElectionDynamic`); the
\* controller logs a ConfigRecord per partition whose value it switched.
\* trace_check sets UncleanLeaderElectionEnable to the value at the start.
TUncleanLeaderElectionDynamic == TRUE
TConfigRecord == ConfigRecord(Ev.unclean_leader_election_enable)

-----------------------------------------------------------------------------

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
         [] Ev.type = "ControlledShutdown"           -> TControlledShutdown
         [] Ev.type = "UnfenceBroker"                -> TUnfenceBroker
         [] Ev.type = "Crash"                        -> TCrash
         [] Ev.type = "Restart"                      -> TRestart
         [] Ev.type = "AlterPartitionReassignments"  -> TAlterPartitionReassignments
         [] Ev.type = "CancelPartitionReassignment"  -> TCancelPartitionReassignment
         [] Ev.type = "CompleteReassignment"         -> TCompleteReassignment
         [] Ev.type = "StopReplica"                  -> TStopReplica
         [] Ev.type = "ConfigRecord"                 -> TConfigRecord
         [] OTHER                                    -> FALSE
    /\ ti' = ti
    /\ tl' = tl + 1
    /\ pe_shift' = pe_shift + (IF Ev.type \in {"ElectLeader", "UncleanElectLeader"} THEN ElectionShift ELSE 0)

\* An AlterPartition resent where the leader's core cannot see it: kref's
\* broker-to-controller channel, like Kafka's, sends a request again when the
\* controller it went to resigned (NOT_CONTROLLER) or its connection broke.
\* If that controller had proposed the change and the next one committed it
\* (Raft commits the old epoch's tail), the resend meets its own first try:
\* INVALID_UPDATE_VERSION (FENCED_LEADER_EPOCH after an election), the only
\* answer the leader logs. In the spec that is AlterPartitionLost (the first
\* answer lost, the request sent again), then the silent CommitAlterPartition
\* that refuses it; taken only right before such a logged answer of that
\* leader, so TLC does not try it everywhere.
ResentUnseen ==
    /\ tl <= Len(TraceLog)
    /\ Ev.type = "HandleAlterPartitionResponse"
    /\ ~("lost" \in DOMAIN Ev)
    /\ Ev.error_code \in {74, 95}  \* FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION
    /\ AlterPartitionLost(Ev.replica)

\* Steps the replicas do not log (see the theory of operation).
SilentStep ==
    /\ \/ \E l \in Replicas : CommitAlterPartition(l) /\ ~(Reassigning(controller) /\ ~Reassigning(controller'))
       \/ ResentUnseen
       \/ \E f \in Replicas :
             /\ fetch[f].type = "FetchResponse"
             /\ fetch[f].records = << >>
             /\ FollowerAppend(f)
    /\ UNCHANGED <<ti, tl, pe_shift>>

TraceNext == TraceStep \/ SilentStep

TraceSpec == TraceInit /\ [][TraceNext]_trace_vars

-----------------------------------------------------------------------------
(* What TLC checks.                                                        *)

\* The spec state trace_check reports, with logs shown by their end offset
\* and last epoch.
StateView ==
    [role |-> role,
     log_end_offset |-> [r \in Replicas |-> Len(log[r])],
     last_epoch |-> [r \in Replicas |-> LastEpoch(r)],
     high_watermark |-> high_watermark,
     leader_epoch |-> leader_epoch,
     partition_epoch |-> partition_epoch,
     isr |-> isr,
     remote_log_end_offset |-> remote_log_end_offset,
     fetch |-> [f \in Replicas |-> IF fetch[f].type = "FetchResponse"
                                   THEN [fetch[f] EXCEPT !.records = Len(@)]
                                   ELSE fetch[f]],
     alter_partition |-> alter_partition,
     \* (without its history of registrations: see the trace's controller steps)
     controller |-> [leader |-> controller.leader, leader_epoch |-> controller.leader_epoch,
                     partition_epoch |-> controller.partition_epoch, isr |-> controller.isr,
                     fenced |-> controller.fenced, broker_epoch |-> controller.broker_epoch,
                     elr |-> controller.elr, replicas |-> controller.replicas,
                     adding |-> controller.adding, removing |-> controller.removing]]

\* The state constraint. TLC register 1 counts the traces accepted so far;
\* register 1 + i holds the deepest cursor trace i reached, printed at every
\* new depth (for the report of a rejected trace). A behaviour that took
\* every event of its trace accepts it: "kref-trace-accepted" is printed
\* (with the spec state there for the traces in TraceShowState), and every
\* later state of that trace is pruned (FALSE: not explored further), so
\* that the batch's search ends when its last trace is decided; when all
\* are accepted TLC stops at once. (TLC 2.15 has no POSTCONDITION; an
\* invariant violation would print the whole behaviour.)
TraceProgress ==
    LET deepest == TLCGet(1 + ti) IN
    /\ deepest <= Len(TraceLog)
    /\ tl > deepest => /\ TLCSet(1 + ti, tl)
                       /\ PrintT(<<"kref-trace-reached", ti, tl>>)
    /\ tl > Len(TraceLog) =>
          /\ IF ti \in TraceShowState
             THEN PrintT(<<"kref-trace-accepted", ti, StateView>>)
             ELSE PrintT(<<"kref-trace-accepted", ti>>)
          /\ LET accepted == TLCGet(1) + 1 IN
             /\ TLCSet(1, accepted)
             /\ accepted = Len(Traces) => TLCSet("exit", TRUE)
=============================================================================
