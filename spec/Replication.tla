----------------------------- MODULE Replication -----------------------------
(***************************************************************************)
(* Theory of operation.                                                    *)
(*                                                                         *)
(* One Kafka partition replicated on the replicas in Replicas, with a      *)
(* KRaft-style controller that holds the partition registration (leader,   *)
(* leader epoch, partition epoch, ISR) and commits every change of it.    *)
(*                                                                         *)
(* - Logs are sequences of [offset, leader_epoch, value] entries; offset   *)
(*   is the position in the log (log start offset is 0: no retention).    *)
(* - A follower fetches in order from its log end offset and sends the     *)
(*   epoch of its last entry (KIP-320).  The leader validates that epoch   *)
(*   against its own leader-epoch history (KIP-101/279) and answers with   *)
(*   any prefix of the records it has past the fetch offset (none         *)
(*   included) and its high watermark, or with a diverging epoch and its  *)
(*   end offset; the follower then truncates (TruncateToEpochEndOffset).  *)
(* - The leader changes the ISR only through the controller (AlterPartition,*)
(*   KIP-497) in three steps: it sends a request (ShrinkIsr, ExpandIsr: one *)
(*   in flight), the controller commits it or refuses it after checking    *)
(*   the leader, the leader epoch, the partition epoch and that added      *)
(*   replicas are not fenced (CommitAlterPartition), and the leader applies *)
(*   the answer (HandleAlterPartitionResponse).  While a change is pending *)
(*   the leader acts on the maximal ISR: committed ISR \cup proposed ISR;   *)
(*   a lost answer is resent (AlterPartitionLost), and a stale-epoch error *)
(*   keeps the proposal pending until the metadata replaces it.            *)
(* - high watermark = min log end offset over the maximal ISR, advanced    *)
(*   only by the leader, never while the committed ISR is smaller than     *)
(*   min.insync.replicas (KAFKA-15583), and never decreasing there;        *)
(*   followers learn it from fetch responses.                              *)
(* - Produce appends a batch.  acks=all is refused while the ISR is below  *)
(*   min.insync.replicas and acknowledged when the high watermark passes   *)
(*   it; acks=1 is appended whatever the ISR and promises nothing.         *)
(* - A crash loses the unflushed suffix of a log and a lagging high        *)
(*   watermark checkpoint (leaders keep the crashed follower's last fetch  *)
(*   offset, KIP-903 keeps it out of ISR expansions after the restart, and *)
(*   its fetch on the wire may still arrive); later the controller fences  *)
(*   the broker (its                                                       *)
(*   session expired), elects a new leader from the unfenced ISR with a    *)
(*   new leader epoch, moves leadership to a preferred replica, and (only  *)
(*   when UncleanLeaderElectionEnable) elects a replica outside the ISR.   *)
(*   A restarted broker is unfenced once it registers again.  With         *)
(*   LiveBrokerFencing a broker that is up may be fenced too (a pause or a *)
(*   cut link past broker.session.timeout.ms); it acts on its old          *)
(*   registration until it applies the new one.  With ControlledShutdowns  *)
(*   a broker that is up may ask to shut down: the controller moves its    *)
(*   leadership away and takes it out of the ISR, as fencing does.         *)
(* - Each replica keeps a leader-epoch cache (KIP-101): its log's epochs,  *)
(*   plus the epoch it became leader of at its log end offset, kept (after *)
(*   it stops leading) until it appends or truncates: its last fetched     *)
(*   epoch may be one with no record in its log.                           *)
(* - Epochs are numbered as in Kafka: a partition's first leader epoch and *)
(*   partition epoch are 0; -1 is "none known".                            *)
(* - Last Replica Standing (KIP-966): with LastReplicaStandingFaults the   *)
(*   last ISR member's crash may lose its unflushed suffix too, and with   *)
(*   min.insync.replicas >= 2 Kafka then re-elects it and loses acked      *)
(*   records.  With EligibleLeaderReplicasEnable the controller keeps the  *)
(*   replicas that left the ISR while it was below min.insync.replicas in  *)
(*   an ELR (they hold everything up to the frozen high watermark), lets   *)
(*   the ISR become empty, elects from the ELR when no ISR member is       *)
(*   electable, and drops a replica from the ELR when it registers after   *)
(*   an unclean shutdown.                                                  *)
(* - Partition reassignment (KIP-455, with ReassignmentEnable): the        *)
(*   controller's replica set, a subset of Replicas (the brokers), grows   *)
(*   to target \cup current with adding and removing replicas; added ones  *)
(*   start as followers with empty logs and fetch; once every adding       *)
(*   replica is in the ISR the controller completes it (replicas = target, *)
(*   ISR \cap target, a new leader epoch when a replica leaves); removed    *)
(*   replicas stop and delete their logs (StopReplica).  See its section.  *)
(*                                                                         *)
(* Every action is one step of one actor and names its whole post-state,   *)
(* so that a kref trace event of the same name maps onto it 1:1.  The      *)
(* properties the code shares with the spec are in the PROPERTIES section  *)
(* at the end; MCReplication.tla bounds the model for TLC.                 *)
(***************************************************************************)
EXTENDS Naturals, Integers, Sequences, FiniteSets

CONSTANTS
    Replicas,            \* the partition's replica set (broker ids)
    Values,              \* record values producers send, each at most once
    NoLeader,            \* the controller's leader field when there is none (-1)
    MinInsyncReplicas,   \* min.insync.replicas
    UncleanLeaderElectionEnable,              \* unclean.leader.election.enable (at the
                                              \* start; ConfigRecord may switch it)
    TruncateToHighWatermarkOnBecomeFollower   \* TRUE: Kafka before KIP-101

\* Two switches that are definitions rather than CONSTANTS, so that every
\* existing configuration (and the trace specs extending this module) keeps
\* working unchanged; a model turns them on in its .cfg with
\* `LastReplicaStandingFaults <- On` (MCReplication.tla defines On).
\* TRUE: the fault assumption "the last live ISR member's log survives its
\* crash" is dropped (a power cut loses any unflushed suffix of every log).
LastReplicaStandingFaults == FALSE
\* TRUE: KIP-966 eligible leader replicas (eligible.leader.replicas.enable).
EligibleLeaderReplicasEnable == FALSE
\* TRUE: the controller's answer to an AlterPartition may be lost and the
\* leader resends (AlterPartitionLost in Next).  Off by default: it grows
\* every model by half; MCReplicationAlterPartitionLost.cfg checks it.
\* Trace validation takes the step whatever this says.
AlterPartitionAnswersLost == FALSE
\* TRUE: the controller may fence a broker that is up (its heartbeats did not
\* reach it for broker.session.timeout.ms: a pause, a cut link, a starved
\* process), not only a crashed one. Off in the models that predate it
\* (their state spaces stay as they were); trace validation turns it on, as
\* real fault runs do it, and MCReplicationLiveFence checks it.
LiveBrokerFencing == FALSE
\* TRUE: a broker applies the registrations the controller committed one at
\* a time, behind it, as Kafka's brokers do (each replays the metadata log
\* and publishes what has committed, batch by batch): it may apply one
\* older than the controller's latest, never one older than what it has
\* applied since it started.  Off in the models that predate it (their
\* state spaces stay as they were: the controller keeps no history);
\* trace validation turns it on, as real brokers lag (session 10's fault
\* seeds 503 and 504), and MCReplicationLagging checks it.
LaggingMetadata == FALSE
\* TRUE: a fetch request a follower sent stays on the wire when it applies
\* new metadata (BecomeLeader, BecomeFollower), as it does across a crash:
\* the old leader may still take it (a paused zombie does, session 11's
\* fault seed 501), learning that offset; the answer reaches no fetcher.
\* The follower's next fetch replaces a request still on the wire (one
\* slot: a take after that is not modelled).  Off in the models that
\* predate it (it costs states); trace validation turns it on and
\* MCReplicationLagging checks it.
LateFetchRequests == FALSE
\* TRUE: a broker that is up may ask to shut down (ControlledShutdown).  Off
\* in the models that predate it; trace validation turns it on.
ControlledShutdowns == FALSE

ASSUME /\ NoLeader \notin Replicas
       /\ MinInsyncReplicas \in 1..Cardinality(Replicas)
       /\ UncleanLeaderElectionEnable \in BOOLEAN
       /\ TruncateToHighWatermarkOnBecomeFollower \in BOOLEAN

VARIABLES
    \* ---- per replica: the broker's local state of the partition ----
    role,                  \* "Leader" | "Follower" | "Online" (restarted, no
                           \* metadata applied yet) | "Offline" (crashed)
    log,                   \* Seq of [offset, leader_epoch, value]
    epoch_cache_tail,      \* the leader-epoch cache's last entry when it has
                           \* no record yet: the epoch r assigned at its log
                           \* end offset on becoming its leader (Kafka's
                           \* maybeAssignEpochStartOffset), -1 = none; every
                           \* other entry is the log's (see KnownEpochs)
    high_watermark,        \* the replica's high watermark
    leader_epoch,          \* leader epoch of the metadata the replica applied
    partition_epoch,       \* partition epoch of that metadata (leader uses it
                           \* in AlterPartition)
    isr,                   \* ISR as the replica last applied it (leader: its ISR)
    remote_log_end_offset, \* [leader -> [follower -> LEO the leader last saw
                           \*  in a valid fetch, -1 = unknown]]
    remote_broker_epoch,   \* [leader -> [follower -> broker epoch that fetch
                           \*  carried (KIP-903), -1 = unknown]]
    fetch,                 \* [follower -> its one in-flight fetch: request or
                           \*  response, or [type |-> "None"]]
    alter_partition,       \* [leader -> its one in-flight AlterPartition:
                           \*  request or response, a proposal awaiting
                           \*  metadata, or [type |-> "None"]]
    \* ---- the controller: the committed partition registration ----
    controller,            \* [leader, leader_epoch, partition_epoch, isr,
                           \*  replicas, adding, removing: the assignment
                           \*  and a reassignment in progress (KIP-455),
                           \*  fenced: brokers whose registration is fenced,
                           \*  registrations: every registration committed
                           \*  so far, kept only with LaggingMetadata]
    \* ---- history (ghost) variables, read only by the properties ----
    produced,              \* values producers have sent
    acks_all,              \* values sent with acks=all
    acked,                 \* entries acknowledged to an acks=all producer
    consumed,              \* entries a leader exposed below its high
                           \* watermark (what consumers may have read)
    faults                 \* [crash, shrink, preferred, live_fence, shutdown]: disruptive steps
                           \* taken so far, and unclean: the brokers whose last
                           \* crash lost part of their log (what a missing
                           \* clean-shutdown marker tells at restart, KIP-966)
                           \* taken so far, bounded by MCReplication

vars == <<role, log, epoch_cache_tail, high_watermark, leader_epoch, partition_epoch, isr,
          remote_log_end_offset, remote_broker_epoch, fetch, alter_partition,
          controller, produced,
          acks_all, acked, consumed, faults>>

replica_vars == <<role, log, epoch_cache_tail, high_watermark, leader_epoch, partition_epoch, isr,
                  remote_log_end_offset, remote_broker_epoch, fetch,
                  alter_partition>>
ghost_vars == <<produced, acks_all, acked, consumed>>

-----------------------------------------------------------------------------
(* Helpers                                                                 *)

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
Max(S) == CHOOSE x \in S : \A y \in S : x >= y
Min2(a, b) == IF a <= b THEN a ELSE b

NoFetch == [type |-> "None"]
NoAlterPartition == [type |-> "None"]

\* The log end offset: the offset the next appended entry will get.
log_end_offset(r) == Len(log[r])

\* The latest epoch of r's leader-epoch cache (what FollowerFetch sends as
\* last_fetched_epoch): an epoch r led without writing a record in it
\* stays there until r truncates or appends (Kafka's cache, not the log,
\* is what the fetcher reads); else the epoch of the last entry, -1 for an
\* empty log.
LastEpoch(r) ==
    IF epoch_cache_tail[r] # -1 THEN epoch_cache_tail[r]
    ELSE IF log[r] = << >> THEN -1 ELSE log[r][Len(log[r])].leader_epoch

\* f's fetch request on the wire was sent before f applied its current
\* metadata (LateFetchRequests): a leader may take it, nobody reads the answer.
StaleFetch(f) ==
    /\ fetch[f].type = "FetchRequest"
    /\ (role[f] # "Follower" \/ fetch[f].current_leader_epoch # leader_epoch[f])

\* What applying new metadata leaves of r's fetch: nothing, or with
\* LateFetchRequests the request it sent, still on the wire.
FetchAfterMetadata(r) ==
    IF LateFetchRequests /\ fetch[r].type = "FetchRequest" THEN fetch[r] ELSE NoFetch

\* Prefix of a log with n entries (truncation keeps offsets < n).
Prefix(s, n) == SubSeq(s, 1, n)

\* The batches a producer may send from the values in S: non-empty
\* sequences of distinct values.
Batches(S) ==
    UNION {{b \in [1..n -> S] : \A i, j \in 1..n : i # j => b[i] # b[j]} :
           n \in 1..Cardinality(S)}
Range(b) == {b[i] : i \in DOMAIN b}

\* The acks settings producers use.
AcksModes == {"all", "1"}

\* Leader-epoch cache lookup (OffsetsForLeaderEpoch, KIP-101/279) on replica
\* r: the largest epoch <= e that r knows, and the end offset of that epoch
\* (the start offset of the next larger epoch, or the log end offset).
\* A leader's cache also holds its current epoch, which starts at its log end
\* offset when it became leader.  Epochs in a log never decrease, so the end
\* offset of epoch x is the number of entries with epoch <= x.
KnownEpochs(r) ==
    {log[r][i].leader_epoch : i \in 1..Len(log[r])}
    \cup (IF epoch_cache_tail[r] # -1 THEN {epoch_cache_tail[r]} ELSE {})
    \cup (IF role[r] = "Leader" THEN {leader_epoch[r]} ELSE {})

\* An epoch older than every epoch r knows ends where r's earliest one
\* starts (offset 0: the spec's logs start there): Kafka answers that
\* epoch itself and that offset (LeaderEpochFileCache.endOffsetFor), so a
\* follower asking from offset 0 is not diverging.  Knowing no epoch at
\* all, r answers -1.
EndOffsetForEpoch(r, e) ==
    LET below == {x \in KnownEpochs(r) : x <= e}
    IN  IF below = {} THEN [epoch |-> IF KnownEpochs(r) = {} THEN -1 ELSE e,
                             end_offset |-> 0]
        ELSE LET x == Max(below)
             IN  [epoch |-> x,
                  end_offset |-> Cardinality({i \in 1..Len(log[r]) :
                                                 log[r][i].leader_epoch <= x})]

\* First offset of the leader's current epoch (its LEO when it became
\* leader, as leaders never truncate): a follower joins the ISR only once it
\* has fetched past it (Kafka checks this with the ISR expansion too).
EpochStartOffset(l) ==
    LET mine == {i \in 1..Len(log[l]) : log[l][i].leader_epoch = leader_epoch[l]}
    IN  IF mine = {} THEN Len(log[l]) ELSE Min(mine) - 1

\* KIP-497: while an AlterPartition is pending the leader cannot know
\* whether the controller committed it, so it counts every replica of the
\* committed and the proposed ISR (an expansion takes effect at once for the
\* high watermark, a shrink only once committed).
MaximalIsr(l) ==
    isr[l] \cup (IF alter_partition[l].type = "None" THEN {}
                 ELSE alter_partition[l].new_isr)

\* The leader sends AlterPartition for new_isr with the epochs it applied
\* and, for each replica it adds, the broker epoch carried by the fetch
\* that justified it (KIP-903): the leader keeps a follower's last fetch
\* across the follower's crash (it cannot know), so the controller is the
\* one to refuse an offset of a previous incarnation (INELIGIBLE_REPLICA).
SendAlterPartition(l, new_isr) ==
    alter_partition' = [alter_partition EXCEPT ![l] =
                          [type |-> "AlterPartitionRequest", new_isr |-> new_isr,
                           leader_epoch |-> leader_epoch[l],
                           partition_epoch |-> partition_epoch[l],
                           broker_epochs |-> [r \in new_isr \ isr[l] |->
                                                remote_broker_epoch[l][r]]]]

Unknown == [f \in Replicas |-> -1]

\* Replica s still holds every entry a leader ever exposed below its high
\* watermark (acknowledged ones included: acked \subseteq consumed) and what
\* r has below its high watermark, i.e. every committed record (read by
\* Crash's fault assumption only).
HoldsCommitted(s, r) ==
    /\ \A e \in consumed : e.offset < Len(log[s]) /\ log[s][e.offset + 1] = e
    /\ high_watermark[r] <= Len(log[s])
    /\ Prefix(log[s], high_watermark[r]) = Prefix(log[r], high_watermark[r])

\* KIP-966: the ELR after the controller commits new_isr.  Replicas leaving
\* an ISR that is then below min.insync.replicas join it (the high watermark
\* is frozen from then on, KAFKA-15583, so they keep holding everything up
\* to it); replicas in the ISR are never in it; once the ISR is back at
\* min.insync.replicas it is empty.  Always empty when ELR is off.
NewElr(new_isr) ==
    IF ~EligibleLeaderReplicasEnable \/ Cardinality(new_isr) >= MinInsyncReplicas
    THEN {}
    ELSE (controller.elr \cup (controller.isr \ new_isr)) \ new_isr

\* KIP-966: when no ISR member can be elected, an unfenced ELR member can.
ElectableFromElr(r) ==
    /\ EligibleLeaderReplicasEnable
    /\ r \in controller.elr
    /\ controller.isr \subseteq controller.fenced

\* What a broker applies of the controller's state c: the partition's
\* registration (Kafka's PartitionRegistration as a broker reads it).
Registration(c) == [leader |-> c.leader, leader_epoch |-> c.leader_epoch,
                    partition_epoch |-> c.partition_epoch, isr |-> c.isr,
                    replicas |-> c.replicas]

\* The controller commits its new state c: with LaggingMetadata its
\* registration joins the history that brokers apply from.
Committed(c) ==
    IF LaggingMetadata THEN [c EXCEPT !.registrations = @ \cup {Registration(c)}]
    ELSE c

\* The registrations broker r may apply: the controller's latest and, with
\* LaggingMetadata, any committed one newer than the one r applied.  A
\* broker that applied nothing of the partition yet replays the metadata
\* log in order from where it starts: one up since the partition's creation
\* from the creation on (session 12: a broker applied the creation after
\* the controller had moved the leadership away, as a SIGTERM during
\* creation does), one that restarted from the registration committed when
\* it registered again (controller.restarted_at: Kafka's broker publishes
\* nothing before its metadata log caught up with the high watermark it
\* found at start; session 12's snapshot test: a restarted broker applied
\* a fencing before the election its controller had written but not yet
\* committed).
Applicable(r) ==
    {Registration(controller)}
    \cup {g \in controller.registrations :
              IF partition_epoch[r] # -1 THEN g.partition_epoch > partition_epoch[r]
              ELSE g.partition_epoch >= controller.restarted_at[r]}

\* The partition epoch of the registration committed when a broker
\* registers again (Restart; `drop`: that registration's own ELR change),
\* kept only with LaggingMetadata (else the state spaces would grow).
RestartFloor(drop) ==
    IF LaggingMetadata THEN controller.partition_epoch + (IF drop THEN 1 ELSE 0) ELSE -1

-----------------------------------------------------------------------------
(* Initial state: a freshly created partition.  All replicas are online   *)
(* with empty logs and in the ISR; the controller has not elected a leader *)
(* yet (the first ElectLeader makes leader epoch and partition epoch 0).   *)

\* Reassignment: the replica sets a partition may be created with (a
\* definition, overridden in a .cfg).  Every broker of Replicas hosts it
\* unless a model that moves partitions says otherwise; a broker outside
\* the set is up ("Online") and hosts nothing (an empty log).
ReplicaSetsAtCreation == {Replicas}

Init ==
    \E assigned \in ReplicaSetsAtCreation :
    /\ role = [r \in Replicas |-> "Online"]
    /\ log = [r \in Replicas |-> << >>]
    /\ epoch_cache_tail = [r \in Replicas |-> -1]
    /\ high_watermark = [r \in Replicas |-> 0]
    /\ leader_epoch = [r \in Replicas |-> -1]
    /\ partition_epoch = [r \in Replicas |-> -1]
    /\ isr = [r \in Replicas |-> assigned]
    /\ remote_log_end_offset = [r \in Replicas |-> Unknown]
    /\ remote_broker_epoch = [r \in Replicas |-> Unknown]
    /\ fetch = [r \in Replicas |-> NoFetch]
    /\ alter_partition = [r \in Replicas |-> NoAlterPartition]
    /\ controller = [leader |-> NoLeader, leader_epoch |-> -1,
                     partition_epoch |-> -1, isr |-> assigned, fenced |-> {},
                     broker_epoch |-> [r \in Replicas |-> 0], elr |-> {},
                     registrations |-> {}, restarted_at |-> [r \in Replicas |-> -1],
                     replicas |-> assigned, adding |-> {}, removing |-> {},
                     unclean_leader_election_enable |-> UncleanLeaderElectionEnable]
    /\ produced = {}
    /\ acks_all = {}
    /\ acked = {}
    /\ consumed = {}
    /\ faults = [crash |-> 0, shrink |-> 0, preferred |-> 0, unclean |-> {},
                  live_fence |-> 0, shutdown |-> 0, reassign |-> 0]

-----------------------------------------------------------------------------
(* Leader actions                                                          *)

\* Produce of a batch of values to leader l, with acks = "all" or "1".
\* min.insync.replicas applies to acks=all only: below it the produce is
\* refused with NOT_ENOUGH_REPLICAS (the committed ISR is what counts).
LeaderAppend(l, batch, acks) ==
    /\ role[l] = "Leader"
    /\ Range(batch) \cap produced = {}
    /\ acks = "all" => Cardinality(isr[l]) >= MinInsyncReplicas
    /\ log' = [log EXCEPT ![l] =
                 @ \o [i \in DOMAIN batch |-> [offset |-> Len(@) + i - 1,
                                               leader_epoch |-> leader_epoch[l],
                                               value |-> batch[i]]]]
    /\ epoch_cache_tail' = [epoch_cache_tail EXCEPT ![l] = -1]
    /\ produced' = produced \cup Range(batch)
    /\ acks_all' = IF acks = "all" THEN acks_all \cup Range(batch) ELSE acks_all
    /\ UNCHANGED <<role, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, alter_partition, controller,
                   acked, consumed, faults>>

\* Leader l answers the fetch request of follower f sent in l's epoch.
\* KIP-320: the follower's (fetch_offset, last_fetched_epoch) must be on the
\* leader's log; if not, answer the diverging epoch and its end offset.
\* Before KIP-101 there is no epoch check: only a fetch offset beyond the
\* leader's log end offset is refused (OFFSET_OUT_OF_RANGE, follower then
\* truncates to the leader's log end offset).
LeaderHandleFetch(l, f) ==
    /\ role[l] = "Leader"
    /\ fetch[f].type = "FetchRequest"
    /\ fetch[f].current_leader_epoch = leader_epoch[l]
    /\ LET req == fetch[f]
           eo  == EndOffsetForEpoch(l, req.last_fetched_epoch)
           diverging ==
               IF TruncateToHighWatermarkOnBecomeFollower
               THEN req.fetch_offset > Len(log[l])
               ELSE /\ req.last_fetched_epoch # -1
                    /\ \/ eo.epoch < req.last_fetched_epoch
                       \/ eo.end_offset < req.fetch_offset
       IN /\ IF diverging
             THEN UNCHANGED <<remote_log_end_offset, remote_broker_epoch>>
             ELSE /\ remote_log_end_offset' =
                        [remote_log_end_offset EXCEPT ![l][f] = req.fetch_offset]
                  /\ remote_broker_epoch' =
                        [remote_broker_epoch EXCEPT ![l][f] = req.broker_epoch]
          \* A request of a crashed incarnation of f (see Crash), or one f
          \* sent before it applied new metadata (LateFetchRequests), is
          \* still handled, but its answer reaches no fetcher.
          /\ IF role[f] = "Offline" \/ StaleFetch(f)
             THEN fetch' = [fetch EXCEPT ![f] = NoFetch]
             ELSE IF diverging
             THEN fetch' = [fetch EXCEPT ![f] =
                     IF TruncateToHighWatermarkOnBecomeFollower
                     THEN [type |-> "DivergingEpoch", epoch |-> -1,
                           end_offset |-> Len(log[l])]
                     ELSE [type |-> "DivergingEpoch", epoch |-> eo.epoch,
                           end_offset |-> eo.end_offset]]
             \* A response carries any prefix of what the leader has past the
             \* fetch offset, none included: fetch.max.bytes,
             \* max.partition.fetch.bytes and a response cut short by the
             \* leader leave the rest for the next fetch (a follower may stay
             \* an epoch behind for many rounds).
             ELSE \E upto \in req.fetch_offset .. Len(log[l]) :
                    fetch' = [fetch EXCEPT ![f] =
                     [type |-> "FetchResponse",
                      records |-> SubSeq(log[l], req.fetch_offset + 1, upto),
                      high_watermark |-> high_watermark[l]]]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   alter_partition, controller, ghost_vars, faults>>

\* Leader l moves its high watermark to the min log end offset over its
\* maximal ISR (unknown follower offsets block it), but not while its
\* committed ISR is below min.insync.replicas (KAFKA-15583: records that
\* fewer replicas hold must not become visible, acks=1 ones included).
\* acks=all produce requests waiting in purgatory for entries of l's epoch
\* that the high watermark now passes are acknowledged.
AdvanceHighWatermark(l) ==
    /\ role[l] = "Leader"
    /\ Cardinality(isr[l]) >= MinInsyncReplicas
    /\ LET new_hw == Min({Len(log[l])} \cup
                         {remote_log_end_offset[l][f] : f \in MaximalIsr(l) \ {l}})
       IN /\ new_hw > high_watermark[l]
          /\ high_watermark' = [high_watermark EXCEPT ![l] = new_hw]
          /\ acked' = acked \cup
                      {log[l][i] : i \in
                         {j \in high_watermark[l] + 1 .. new_hw :
                             /\ log[l][j].leader_epoch = leader_epoch[l]
                             /\ log[l][j].value \in acks_all}}
          \* Every record below the new HW is readable by consumers now,
          \* whatever its epoch or acks.
          /\ consumed' = consumed \cup
                         {log[l][i] : i \in high_watermark[l] + 1 .. new_hw}
    /\ UNCHANGED <<epoch_cache_tail, role, log, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, alter_partition, controller,
                   produced, acks_all, faults>>

\* Leader l asks the controller to remove the followers in `out` that have
\* not caught up for longer than replica.lag.time.max.ms (one AlterPartition
\* for all of them, as Kafka's ISR-expiration task does).  The timer is
\* abstracted away: any follower behind the leader's log end offset may be
\* judged lagging.
ShrinkIsr(l, out) ==
    /\ role[l] = "Leader"
    /\ alter_partition[l].type = "None"
    /\ out # {} /\ out \subseteq isr[l] \ {l}
    /\ \A f \in out : remote_log_end_offset[l][f] < Len(log[l])
    /\ SendAlterPartition(l, isr[l] \ out)
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, controller, ghost_vars>>
    /\ faults' = [faults EXCEPT !.shrink = @ + 1]

\* Leader l asks to add follower f once it has fetched up to the high
\* watermark and past the start of l's epoch.
ExpandIsr(l, f) ==
    /\ role[l] = "Leader"
    /\ alter_partition[l].type = "None"
    /\ f \notin isr[l]
    /\ remote_log_end_offset[l][f] >= high_watermark[l]
    /\ remote_log_end_offset[l][f] >= EpochStartOffset(l)
    /\ SendAlterPartition(l, isr[l] \cup {f})
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, controller, ghost_vars, faults>>

\* Leader l applies the controller's answer, as Kafka's Partition does
\* (handleAlterPartitionUpdate / handleAlterPartitionError).  A committed
\* change is taken only if it is newer than the partition epoch l already
\* applied (the same change may have reached l as metadata first).  On
\* INELIGIBLE_REPLICA the controller says it applied nothing: l drops the
\* proposal.  On FENCED_LEADER_EPOCH or INVALID_UPDATE_VERSION l's
\* registration is stale and l cannot tell whether an earlier send of the
\* same proposal was committed (its answer may have been lost): the
\* proposal stays pending (MaximalIsr counts it, no other ISR change
\* starts) until the metadata replaces it (BecomeLeader, BecomeFollower).
\* So does NEW_LEADER_ELECTED (the commit completed a reassignment that
\* started a new leader epoch, see CompleteReassignment): dropping the
\* proposal there would let a removed leader, alone in its old ISR,
\* acknowledge records no new replica holds.
HandleAlterPartitionResponse(l) ==
    /\ alter_partition[l].type = "AlterPartitionResponse"
    /\ LET resp == alter_partition[l]
       IN  IF /\ resp.error = "NONE"
              /\ role[l] = "Leader"
              /\ resp.leader_epoch = leader_epoch[l]
              /\ resp.partition_epoch > partition_epoch[l]
           THEN /\ isr' = [isr EXCEPT ![l] = resp.isr]
                /\ partition_epoch' = [partition_epoch EXCEPT ![l] = resp.partition_epoch]
           ELSE UNCHANGED <<isr, partition_epoch>>
    /\ alter_partition' = [alter_partition EXCEPT ![l] =
          IF @.error \in {"FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION"}
             \/ @.error = "NEW_LEADER_ELECTED"
          THEN [type |-> "AwaitMetadata", new_isr |-> @.new_isr]
          ELSE NoAlterPartition]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, remote_log_end_offset, remote_broker_epoch,
                   fetch, controller, ghost_vars, faults>>

\* The controller's answer to leader l is lost (a broken connection, a
\* timeout, the controller moved): l cannot know whether its change was
\* committed, so it keeps counting the proposed ISR and sends the same
\* request again (Kafka's AlterPartitionManager).  A request lost before
\* the controller handled it is resent as it was: the same state, no step.
\* If the controller had committed it, the resend finds a newer partition
\* epoch (INVALID_UPDATE_VERSION) and l waits for the metadata.
AlterPartitionLost(l) ==
    /\ alter_partition[l].type = "AlterPartitionResponse"
    /\ alter_partition' = [alter_partition EXCEPT ![l] = alter_partition[l].request]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, controller,
                   ghost_vars, faults>>

-----------------------------------------------------------------------------
(* Follower actions                                                        *)

\* Follower f sends a fetch to the leader of its epoch: from its log end
\* offset, with the epoch of its last entry and its current leader epoch.
\* One fetch in flight per follower, as Kafka's fetcher thread does.
FollowerFetch(f) ==
    /\ role[f] = "Follower"
    /\ fetch[f].type = "None" \/ StaleFetch(f)
    /\ \E l \in Replicas : role[l] = "Leader" /\ leader_epoch[l] = leader_epoch[f]
    /\ fetch' = [fetch EXCEPT ![f] =
                   [type |-> "FetchRequest",
                    fetch_offset |-> Len(log[f]),
                    last_fetched_epoch |-> LastEpoch(f),
                    current_leader_epoch |-> leader_epoch[f],
                    broker_epoch |-> controller.broker_epoch[f]]]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, alter_partition, controller, ghost_vars,
                   faults>>

\* The fetch of follower f fails: no replica leads in f's epoch any more
\* (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, or the connection broke).
\* f drops it, backs off, and fetches again once a leader of its epoch is
\* known.
FetchError(f) ==
    /\ fetch[f].type = "FetchRequest"
    /\ ~\E l \in Replicas : role[l] = "Leader"
                            /\ leader_epoch[l] = fetch[f].current_leader_epoch
    /\ fetch' = [fetch EXCEPT ![f] = NoFetch]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, alter_partition, controller, ghost_vars,
                   faults>>

\* Follower f appends the records of a fetch response and takes the
\* leader's high watermark, bounded by its own log end offset.
FollowerAppend(f) ==
    /\ role[f] = "Follower"
    /\ fetch[f].type = "FetchResponse"
    /\ LET new_log == log[f] \o fetch[f].records
       IN /\ log' = [log EXCEPT ![f] = new_log]
          /\ high_watermark' = [high_watermark EXCEPT ![f] =
                                   Min2(fetch[f].high_watermark, Len(new_log))]
    \* Records appended at the tail's start offset replace the tail entry
    \* (Kafka's cache drops entries a newer assignment makes non-monotonic).
    /\ epoch_cache_tail' = IF fetch[f].records = << >> THEN epoch_cache_tail
                           ELSE [epoch_cache_tail EXCEPT ![f] = -1]
    /\ fetch' = [fetch EXCEPT ![f] = NoFetch]
    /\ UNCHANGED <<role, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, alter_partition, controller, ghost_vars,
                   faults>>

\* Follower f handles a diverging-epoch answer (KIP-279/320): it looks up the
\* diverging epoch in its own epoch cache; if it has that epoch it truncates
\* to the smaller of both end offsets, else to the end of its largest epoch
\* below it (and the next fetch narrows further).  Before KIP-101 the answer
\* is OFFSET_OUT_OF_RANGE and it truncates to the leader's log end offset.
TruncationOffset(f, epoch, end_offset) ==
    IF TruncateToHighWatermarkOnBecomeFollower
    THEN Min2(end_offset, Len(log[f]))
    ELSE LET mine == EndOffsetForEpoch(f, epoch)
         IN  IF mine.epoch = epoch /\ epoch # -1
             THEN Min2(end_offset, mine.end_offset)
             ELSE mine.end_offset

TruncateToEpochEndOffset(f) ==
    /\ role[f] = "Follower"
    /\ fetch[f].type = "DivergingEpoch"
    /\ LET to == TruncationOffset(f, fetch[f].epoch, fetch[f].end_offset)
       IN /\ log' = [log EXCEPT ![f] = Prefix(@, to)]
          /\ high_watermark' = [high_watermark EXCEPT ![f] = Min2(@, to)]
    \* Kafka's truncateTo drops cache entries from the log end even when no
    \* record goes (UnifiedLog.truncateTo): the tail never survives.
    /\ epoch_cache_tail' = [epoch_cache_tail EXCEPT ![f] = -1]
    /\ fetch' = [fetch EXCEPT ![f] = NoFetch]
    /\ UNCHANGED <<role, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, alter_partition, controller, ghost_vars,
                   faults>>

-----------------------------------------------------------------------------
(* Metadata propagation: a broker applies the controller's registration   *)
(* (with LaggingMetadata, any committed one newer than its own: see       *)
(* Applicable).  Until it does, it acts on its old one (a deposed leader   *)
(* is a zombie that still takes appends and answers fetches in its old    *)
(* epoch).                                                                 *)
(* Applying one drops a pending AlterPartition: the committed state is     *)
(* now known, and a late answer is stale.                                  *)

\* r applies a registration naming it leader: a new leader epoch (it then
\* forgets what it knew of followers' offsets) or a new partition epoch
\* (an ISR change it did not make, e.g. the controller fencing a follower).
BecomeLeaderTo(r, g) ==
    /\ g.leader = r
    /\ r \in g.replicas  \* (always: a leader is in the ISR, in the replicas)
    /\ role[r] # "Offline"
    /\ \/ role[r] # "Leader"
       \/ leader_epoch[r] # g.leader_epoch
       \/ partition_epoch[r] # g.partition_epoch
    /\ role' = [role EXCEPT ![r] = "Leader"]
    /\ leader_epoch' = [leader_epoch EXCEPT ![r] = g.leader_epoch]
    /\ partition_epoch' = [partition_epoch EXCEPT ![r] = g.partition_epoch]
    /\ isr' = [isr EXCEPT ![r] = g.isr]
    /\ IF role[r] = "Leader" /\ leader_epoch[r] = g.leader_epoch
       THEN UNCHANGED <<remote_log_end_offset, remote_broker_epoch, epoch_cache_tail>>
       ELSE /\ remote_log_end_offset' = [remote_log_end_offset EXCEPT ![r] = Unknown]
            /\ remote_broker_epoch' = [remote_broker_epoch EXCEPT ![r] = Unknown]
            \* A new term: its epoch starts at the log end offset in the cache
            \* (before KIP-101 there is no cache).
            /\ epoch_cache_tail' = IF TruncateToHighWatermarkOnBecomeFollower
                                   THEN epoch_cache_tail
                                   ELSE [epoch_cache_tail EXCEPT ![r] = g.leader_epoch]
    /\ fetch' = [fetch EXCEPT ![r] = FetchAfterMetadata(r)]
    /\ alter_partition' = [alter_partition EXCEPT ![r] = NoAlterPartition]
    /\ UNCHANGED <<log, high_watermark, controller, ghost_vars, faults>>

BecomeLeader(r) == \E g \in Applicable(r) : BecomeLeaderTo(r, g)

\* r applies a registration naming another leader (or none) with a new
\* leader epoch, or is back after a restart.  Since KIP-101 it keeps its log
\* and lets the first fetch find the divergence; before it, it truncated to
\* its high watermark here.
BecomeFollowerTo(r, g) ==
    /\ g.leader # r
    /\ r \in g.replicas  \* a broker hosts the partition only while assigned
    /\ role[r] # "Offline"
    /\ \/ role[r] \in {"Leader", "Online"}
       \/ leader_epoch[r] # g.leader_epoch
    /\ role' = [role EXCEPT ![r] = "Follower"]
    /\ leader_epoch' = [leader_epoch EXCEPT ![r] = g.leader_epoch]
    /\ partition_epoch' = [partition_epoch EXCEPT ![r] = g.partition_epoch]
    /\ isr' = [isr EXCEPT ![r] = g.isr]
    /\ log' = IF TruncateToHighWatermarkOnBecomeFollower
              THEN [log EXCEPT ![r] = Prefix(@, high_watermark[r])]
              ELSE log
    \* Since KIP-101 the cache is kept: an epoch r led without a record is
    \* its last fetched epoch until the first answer makes it truncate.
    /\ epoch_cache_tail' = IF TruncateToHighWatermarkOnBecomeFollower
                           THEN [epoch_cache_tail EXCEPT ![r] = -1]
                           ELSE epoch_cache_tail
    /\ remote_log_end_offset' = [remote_log_end_offset EXCEPT ![r] = Unknown]
    /\ remote_broker_epoch' = [remote_broker_epoch EXCEPT ![r] = Unknown]
    /\ fetch' = [fetch EXCEPT ![r] = FetchAfterMetadata(r)]
    /\ alter_partition' = [alter_partition EXCEPT ![r] = NoAlterPartition]
    /\ UNCHANGED <<high_watermark, controller, ghost_vars, faults>>

BecomeFollower(r) == \E g \in Applicable(r) : BecomeFollowerTo(r, g)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Partition reassignment (KIP-455), as Kafka's KRaft controller does it   *)
(* (ReplicationControlManager, PartitionReassignmentReplicas,              *)
(* PartitionChangeBuilder) and kref's controller core.                    *)
(*                                                                         *)
(* The controller's replicas, adding and removing say which brokers of     *)
(* Replicas host the partition.  AlterPartitionReassignments(target) grows *)
(* the replica set to target \cup original (original: the replicas before  *)
(* any reassignment in progress, whose adding replicas it undoes), with    *)
(* adding = target \ original and removing = original \ target.  An added  *)
(* replica applies the registration as a follower with an empty log        *)
(* (BecomeFollower) and fetches; the leader takes it into the ISR through  *)
(* AlterPartition.  When every adding replica is in the ISR (and some      *)
(* target replica is) the controller completes the reassignment in the     *)
(* same record: replicas = target, ISR \cap target, a new leader from the *)
(* ISR if the leader left, and a new leader epoch whenever a replica left  *)
(* (a removed replica must not fetch in the old term).                     *)
(* CancelPartitionReassignment reverts to the original replicas.  A        *)
(* broker that applies a registration without it stops its replica and    *)
(* deletes its log (StopReplica).  Off (ReassignmentEnable) in every model *)
(* but MCReplicationReassign*, so their state spaces stay as they were.    *)
(***************************************************************************)

\* TRUE: the controller moves the partition (a model turns it on in its .cfg
\* with `ReassignmentEnable <- On`; trace validation turns it on).
ReassignmentEnable == FALSE
\* TRUE (a must-fail model only): the bug of completing a reassignment
\* before the adding replicas caught up, counting them as in sync.
ReassignmentSkipsCatchUp == FALSE

\* A reassignment is in progress in the controller's state c.
Reassigning(c) == c.adding \cup c.removing # {}

\* Kafka's completion test (PartitionReassignmentReplicas): every adding
\* replica is in the ISR, and so is some target replica.
ReassignmentCaughtUp(c) ==
    /\ Reassigning(c)
    /\ \/ ReassignmentSkipsCatchUp
       \/ /\ c.adding \subseteq c.isr
          /\ (c.replicas \ c.removing) \cap c.isr # {}

\* The completed state: replicas = target, the ISR (and ELR) without the
\* removed replicas.  (With ReassignmentSkipsCatchUp the adding replicas
\* are taken into the ISR as they are.)
CompleteReassignment(c) ==
    LET target == c.replicas \ c.removing
        kept == (c.isr \cap target)
                \cup (IF ReassignmentSkipsCatchUp THEN c.adding ELSE {})
    IN  [c EXCEPT !.replicas = target, !.adding = {}, !.removing = {},
                  !.isr = kept, !.elr = @ \cap target]

MaybeCompleteReassignment(c) ==
    IF ReassignmentCaughtUp(c) THEN CompleteReassignment(c) ELSE c

\* The leader after the partition change from `old` to c (c's ISR and
\* replica set decided): kept while in the ISR, else any unfenced ISR
\* member (kref takes the first in replica order; NoLeader if none); the
\* leader epoch goes up with a new leader or when a replica left the set
\* (Kafka's PartitionChangeBuilder bumps it for a shrinking assignment so
\* that a removed follower cannot fetch in the old term).  The set of the
\* possible results; a singleton when nothing of the assignment changed.
\* (A fault assumption, that of Crash carried over: a reassignment takes
\* replicas out of the ISR only while the members it keeps that crashed
\* hold every committed record, and every entry a leader still counts
\* them for (its last fetch offset from before the crash: the leader
\* cannot know, see Crash) or a fetch it sent before the crash may still
\* make a leader count.  A member that lost its unflushed suffix while
\* others held it, not fenced yet, must not be left the whole ISR by the
\* operator's move, nor be counted by the removed leader's high watermark
\* afterwards: TLC found both with one crash; Kafka, which cannot tell
\* either, gives no guarantee there.)
CrashedSinceCounted(l, s) ==
    role[s] = "Offline" \/ remote_broker_epoch[l][s] # controller.broker_epoch[s]

KeptIsrHoldsCommitted(old, c) ==
    \/ old.replicas = c.replicas
    \/ old.isr \subseteq c.isr
    \/ \A s \in c.isr :
          /\ role[s] = "Offline" =>
                /\ \A e \in consumed : e.offset < Len(log[s]) /\ log[s][e.offset + 1] = e
                \* (its fetch from before the crash, still on the wire)
                /\ fetch[s].type = "FetchRequest" => fetch[s].fetch_offset <= Len(log[s])
          /\ \A l \in Replicas \ {s} :
                (role[l] = "Leader" /\ remote_log_end_offset[l][s] > 0 /\ CrashedSinceCounted(l, s))
                    => /\ remote_log_end_offset[l][s] <= Len(log[s])
                       /\ Prefix(log[s], remote_log_end_offset[l][s])
                             = Prefix(log[l], remote_log_end_offset[l][s])

NewLeaders(old, c) ==
    LET shrunk == ~(old.replicas \subseteq c.replicas)
        choices == IF ~KeptIsrHoldsCommitted(old, c) THEN {}
                   ELSE IF old.leader \in c.isr THEN {old.leader}
                   ELSE IF c.isr \ c.fenced = {} THEN {NoLeader}
                   ELSE c.isr \ c.fenced
    IN  {[c EXCEPT !.leader = l,
                   !.leader_epoch = IF l # old.leader \/ (shrunk /\ l # NoLeader)
                                    THEN old.leader_epoch + 1 ELSE old.leader_epoch] :
         l \in choices}

\* The operator's AlterPartitionReassignments with a target replica set:
\* one PartitionChangeRecord (the growth step, or at once the completion
\* when every adding replica is already in the ISR).
AlterPartitionReassignments(target) ==
    /\ target # {}
    /\ target # controller.replicas \ controller.removing  \* (the same target: nothing to do)
    /\ LET original == controller.replicas \ controller.adding
           grown == [controller EXCEPT !.replicas = target \cup original,
                                       !.adding = target \ original,
                                       !.removing = original \ target,
                                       !.isr = @ \cap (target \cup original),
                                       !.elr = @ \cap (target \cup original),
                                       !.partition_epoch = @ + 1]
       IN  /\ grown.isr # {}
           /\ \E c \in NewLeaders(controller, MaybeCompleteReassignment(grown)) :
                 controller' = Committed(c)
    /\ faults' = [faults EXCEPT !.reassign = @ + 1]
    /\ UNCHANGED <<replica_vars, ghost_vars>>

\* AlterPartitionReassignments with a null target (Kafka's
\* cancelPartitionReassignment): back to the original replicas, the adding
\* ones leave the ISR.  Refused when no original replica is in the ISR
\* (kref elects uncleanly there when the topic allows it: not modelled).
CancelPartitionReassignment ==
    /\ Reassigning(controller)
    /\ LET original == controller.replicas \ controller.adding
           reverted == [controller EXCEPT !.replicas = original, !.adding = {},
                                          !.removing = {}, !.isr = @ \cap original,
                                          !.elr = @ \cap original,
                                          !.partition_epoch = @ + 1]
       IN  /\ reverted.isr # {}
           /\ \E c \in NewLeaders(controller, reverted) : controller' = Committed(c)
    /\ faults' = [faults EXCEPT !.reassign = @ + 1]
    /\ UNCHANGED <<replica_vars, ghost_vars>>

\* Broker r applies a registration g that does not name it among the
\* replicas (Kafka's ReplicaManager.applyDelta: stopPartitions with delete):
\* it stops leading or fetching and deletes its log; it hosts nothing, as a
\* broker that never did ("Online", an empty log), until a registration
\* assigns it again.  A restarted broker whose replica was removed while
\* it was down deletes the stray log the same way.
StopReplicaTo(r, g) ==
    /\ r \notin g.replicas
    /\ \/ role[r] \in {"Leader", "Follower"}
       \/ role[r] = "Online" /\ log[r] # << >>
    /\ role' = [role EXCEPT ![r] = "Online"]
    /\ log' = [log EXCEPT ![r] = << >>]
    /\ epoch_cache_tail' = [epoch_cache_tail EXCEPT ![r] = -1]
    /\ high_watermark' = [high_watermark EXCEPT ![r] = 0]
    /\ leader_epoch' = [leader_epoch EXCEPT ![r] = -1]
    /\ partition_epoch' = [partition_epoch EXCEPT ![r] = -1]
    /\ isr' = [isr EXCEPT ![r] = {}]
    /\ remote_log_end_offset' = [remote_log_end_offset EXCEPT ![r] = Unknown]
    /\ remote_broker_epoch' = [remote_broker_epoch EXCEPT ![r] = Unknown]
    /\ fetch' = [fetch EXCEPT ![r] = FetchAfterMetadata(r)]
    /\ alter_partition' = [alter_partition EXCEPT ![r] = NoAlterPartition]
    /\ UNCHANGED <<controller, ghost_vars, faults>>

StopReplica(r) == \E g \in Applicable(r) : StopReplicaTo(r, g)

-----------------------------------------------------------------------------
(* Controller actions                                                      *)

\* The controller handles leader l's AlterPartition.  It refuses a request
\* from a replica that is not the leader or not in the current leader
\* epoch (FENCED_LEADER_EPOCH), one based on an older partition epoch
\* (INVALID_UPDATE_VERSION), and one adding a fenced broker (KIP-841) or
\* a broker of another incarnation than the one that fetched (KIP-903)
\* (INELIGIBLE_REPLICA).  Otherwise it commits the new ISR with a new
\* partition epoch and answers with the committed state.
AlterPartitionError(req, l) ==
    IF controller.leader # l \/ controller.leader_epoch # req.leader_epoch
    THEN "FENCED_LEADER_EPOCH"
    ELSE IF controller.partition_epoch # req.partition_epoch
    THEN "INVALID_UPDATE_VERSION"
    ELSE IF \E r \in DOMAIN req.broker_epochs :
               \/ r \in controller.fenced
               \/ req.broker_epochs[r] # controller.broker_epoch[r]
    THEN "INELIGIBLE_REPLICA"
    ELSE "NONE"

\* With a reassignment in progress, the commit that takes the last adding
\* replica into the ISR completes it in the same record (Kafka's
\* PartitionChangeBuilder; MaybeCompleteReassignment is the identity
\* otherwise); when that starts a new leader epoch the leader is answered
\* NEW_LEADER_ELECTED and learns the rest from the metadata.
CommitAlterPartition(l) ==
    /\ alter_partition[l].type = "AlterPartitionRequest"
    /\ LET req == alter_partition[l]
           error == AlterPartitionError(req, l)
       IN  /\ IF error = "NONE"
              THEN \E c \in NewLeaders(controller, MaybeCompleteReassignment(
                                [controller EXCEPT !.isr = req.new_isr,
                                                   !.partition_epoch = @ + 1,
                                                   !.elr = NewElr(req.new_isr)])) :
                      controller' = Committed(c)
              ELSE controller' = controller
           /\ alter_partition' = [alter_partition EXCEPT ![l] =
                 [type |-> "AlterPartitionResponse", new_isr |-> req.new_isr,
                  error |-> IF error = "NONE" /\ controller'.leader_epoch # controller.leader_epoch
                            THEN "NEW_LEADER_ELECTED" ELSE error,
                  leader_epoch |-> req.leader_epoch,
                  isr |-> controller'.isr,
                  partition_epoch |-> controller'.partition_epoch,
                  request |-> req]]
    /\ UNCHANGED <<epoch_cache_tail, role, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, fetch, ghost_vars, faults>>

\* Elect an unfenced ISR member when the partition has no leader, with a
\* new leader epoch; with KIP-966, an unfenced ELR member when no ISR
\* member is electable (it becomes the ISR and leaves the ELR).
ElectLeader(r) ==
    /\ controller.leader = NoLeader
    /\ r \in controller.isr \/ ElectableFromElr(r)
    /\ r \notin controller.fenced
    /\ controller' = Committed([controller EXCEPT !.leader = r,
                                        !.leader_epoch = @ + 1,
                                        !.partition_epoch = @ + 1,
                                        !.isr = IF r \in @ THEN @ ELSE {r},
                                        !.elr = @ \ {r}])
    /\ UNCHANGED <<replica_vars, ghost_vars, faults>>

\* Preferred (or any operator-chosen) leader election: move leadership to
\* another unfenced ISR member.  The old leader becomes a zombie until it
\* applies the new registration.
ElectPreferredLeader(r) ==
    /\ controller.leader \notin {NoLeader, r}
    /\ r \in controller.isr
    /\ r \notin controller.fenced
    /\ controller' = Committed([controller EXCEPT !.leader = r,
                                        !.leader_epoch = @ + 1,
                                        !.partition_epoch = @ + 1])
    /\ UNCHANGED <<replica_vars, ghost_vars>>
    /\ faults' = [faults EXCEPT !.preferred = @ + 1]

\* unclean.leader.election.enable: when every ISR member is fenced, elect
\* an unfenced replica outside the ISR; it becomes the whole ISR.
UncleanElectLeader(r) ==
    /\ controller.unclean_leader_election_enable
    /\ controller.leader = NoLeader
    /\ controller.isr \subseteq controller.fenced
    /\ r \notin controller.isr
    /\ r \in controller.replicas
    /\ r \notin controller.fenced
    /\ controller' = Committed([controller EXCEPT !.leader = r,
                                        !.leader_epoch = @ + 1,
                                        !.partition_epoch = @ + 1,
                                        !.isr = {r}])
    /\ UNCHANGED <<replica_vars, ghost_vars, faults>>

-----------------------------------------------------------------------------
(* unclean.leader.election.enable at runtime (switch                       *)
(* UncleanLeaderElectionDynamic)                                           *)

\* Kafka lets an operator change unclean.leader.election.enable while the
\* cluster runs (IncrementalAlterConfigs on the topic, the cluster-wide
\* default or the active controller's node: KIP-226); the controller writes
\* a ConfigRecord and reads the new value at its next decision.  The
\* controller's state holds the value in force for this partition
\* (controller.unclean_leader_election_enable, UncleanLeaderElectionEnable
\* at the start): UncleanElectLeader and the fencing's leader epoch
\* (CanElect) read it.  Turned on, kref's controller (like Kafka's) elects
\* the offline partitions in the same batch: here the UncleanElectLeader
\* that follows.  Off in every model (their state spaces stay as they
\* were: the value never changes); trace validation turns it on
\* (test_cluster_configs switches it on at runtime).
UncleanLeaderElectionDynamic == FALSE

ConfigRecord(v) ==
    /\ UncleanLeaderElectionDynamic
    /\ controller' = [controller EXCEPT !.unclean_leader_election_enable = v]
    /\ UNCHANGED <<replica_vars, ghost_vars, faults>>

-----------------------------------------------------------------------------
\* Whether the controller, in the registration c, has a replica to elect:
\* an unfenced ISR member; with KIP-966 an unfenced ELR member when every
\* ISR member is fenced; with unclean election any unfenced replica then.
CanElect(c) ==
    \E s \in c.replicas :
        /\ s \notin c.fenced
        /\ \/ s \in c.isr
           \/ EligibleLeaderReplicasEnable /\ s \in c.elr /\ c.isr \subseteq c.fenced
           \/ c.unclean_leader_election_enable /\ c.isr \subseteq c.fenced /\ s \notin c.isr

\* The session of broker r expires: the controller fences it,
\* removes it from the ISR unless it is the last member (without KIP-966
\* the ISR is never empty; with it, r joins the ELR instead) and clears
\* the leader if r led, with a new partition epoch.  A leader that goes to
\* none is a leader change: when no replica can take over, Kafka's
\* controller writes leader -1 with a new leader epoch (every leader
\* change bumps it), so the followers apply a leaderless registration of
\* a new term and stop fetching from the old one.  When a replica can take
\* over, Kafka elects it in the same record (one new leader epoch): here
\* the ElectLeader that follows bumps it, and the leaderless state between
\* the two steps keeps the old epoch (trace_check marks the pair
\* "after_fence").
\* With LiveBrokerFencing r may be up (Kafka fences on the session alone):
\* nothing tells r at once, so a fenced leader goes on as a zombie of its
\* epoch (appends, answers fetches of followers still in that epoch) until
\* it applies the new registration; its high watermark still needs every
\* member of its ISR, the new leader included, so it acknowledges nothing
\* the new leader lacks.  A fenced follower keeps fetching (KIP-903 keeps
\* it out of the ISR until UnfenceBroker).  Its heartbeats resume with
\* the same broker epoch, and the controller unfences it once caught up.
\* BrokerLeaves(r) is the controller's change, shared with ControlledShutdown.
BrokerLeaves(r) ==
    /\ r \notin controller.fenced
    /\ LET new_isr == IF controller.isr = {r} /\ ~EligibleLeaderReplicasEnable
                      THEN controller.isr
                      ELSE controller.isr \ {r}
           fenced == [controller EXCEPT
                         !.leader = IF @ = r THEN NoLeader ELSE @,
                         !.isr = new_isr,
                         !.elr = NewElr(new_isr),
                         !.fenced = @ \cup {r}]
       IN  controller' = Committed(
                [fenced EXCEPT
                    !.leader_epoch = IF controller.leader = r /\ ~CanElect(fenced)
                                     THEN @ + 1 ELSE @,
                    !.partition_epoch = IF new_isr = controller.isr
                                               /\ controller.leader # r
                                        THEN @ ELSE @ + 1])

FenceBroker(r) ==
    /\ role[r] = "Offline" \/ LiveBrokerFencing
    /\ BrokerLeaves(r)
    /\ faults' = IF role[r] = "Offline" THEN faults
                 ELSE [faults EXCEPT !.live_fence = @ + 1]
    /\ UNCHANGED <<replica_vars, ghost_vars>>

\* Restarted broker r registered again and caught up with the metadata:
\* the controller unfences it (it may rejoin the ISR and be elected).
UnfenceBroker(r) ==
    /\ r \in controller.fenced
    /\ role[r] # "Offline"
    /\ controller' = [controller EXCEPT !.fenced = @ \ {r}]
    /\ UNCHANGED <<replica_vars, ghost_vars, faults>>

-----------------------------------------------------------------------------
(* Controlled shutdown (switch ControlledShutdowns)                        *)

\* Broker r asks to shut down (controlled.shutdown.enable: its heartbeat
\* carries want_shut_down).  Kafka's controller marks it in controlled
\* shutdown (a BrokerRegistrationChangeRecord) and, in the same batch, moves
\* every leadership off it and takes it out of every ISR, the last member
\* excepted (ReplicationControlManager's handling of a broker entering
\* controlled shutdown); from then on r may neither lead nor join an ISR.
\* Once r leads nothing and has applied that batch, the controller fences
\* it and tells it to stop.  For one partition the batch is FenceBroker's
\* change of the registration (BrokerLeaves) of a broker that is up: the
\* spec's `fenced` stands for "may not lead nor join the ISR", which both
\* states mean, and the fencing record that follows changes nothing of the
\* partition (trace_check takes it as a repeat of this step).  r goes on
\* applying metadata and following until its process stops (a Crash that
\* keeps its log: it flushed) and comes back through Restart.  Kafka does
\* not unfence a broker in controlled shutdown before it registers again;
\* the spec does not forbid it (UnfenceBroker of a live fenced broker): a
\* superset.  Not a fault: it is counted apart (faults.shutdown) so that a
\* model can bound it.  Off in the models that predate it; trace validation
\* turns it on (every process test ends with SIGTERMs) and
\* MCReplicationControlledShutdown checks it, without crashes: Crash's fault
\* assumption (the last live ISR member keeps its log) does not cover a
\* member that leaves the ISR while it is up, and TLC then finds acknowledged
\* records lost (session 12: a follower crashes losing its unflushed suffix,
\* the leader shuts down and leaves it as the ISR, and as a zombie of its
\* epoch acknowledges what the follower had fetched; or the leader crashes
\* losing it, and the live follower holding it shuts down).  Kafka's
\* controller does the same (it cannot tell a crashed broker before its
\* session ends); the MCReplicationLiveFence models have no crash either.
ControlledShutdown(r) ==
    /\ ControlledShutdowns
    /\ role[r] # "Offline"
    /\ BrokerLeaves(r)
    /\ faults' = [faults EXCEPT !.shutdown = @ + 1]
    /\ UNCHANGED <<replica_vars, ghost_vars>>

-----------------------------------------------------------------------------
(* Failures                                                                *)

\* Broker r crashes.  It loses the unflushed suffix of its log, of any
\* length (flushing is not modelled), and its high watermark falls back to
\* its last checkpoint (replica.high.watermark.checkpoint.interval.ms), at
\* any point below.  Fencing is a later, separate controller step.
\* Fault assumption behind Kafka's guarantee ("acked records survive while
\* one ISR member does"): the last live ISR member's log survives its crash,
\* and the ISR goes down as a whole only when no member has lost a committed
\* record (acked, or below the last one's high watermark): else the
\* controller, fencing them one by one, may leave exactly the member that
\* lost it as the last one (TLC found both with 2 crashes).
\* LastReplicaStandingFaults drops both halves.  A crash that lost part of the
\* log is an unclean shutdown the broker notices at restart; one that lost
\* nothing counts as clean (Kafka would call it unclean too, which only
\* makes it drop more replicas from the ELR: the model is the riskier case).
\* CrashKeeps is TRUE: every prefix and checkpoint above may be kept.  It is
\* a hook for trace validation only, whose .cfg replaces it (TLC's `<-`) by
\* the one choice the trace shows (TraceReplication's TCrashKeeps), so that
\* TLC does not build a state for every other choice only to discard it.
CrashKeeps(r, keep, checkpoint) == TRUE

Crash(r) ==
    /\ role[r] # "Offline"
    /\ LET last == /\ r \in controller.isr
                   /\ \A s \in controller.isr \ {r} : role[s] = "Offline"
                   /\ ~LastReplicaStandingFaults
       IN /\ last => \A s \in controller.isr \ {r} : HoldsCommitted(s, r)
          /\ \E keep \in (IF last THEN {Len(log[r])} ELSE 0..Len(log[r])) :
             \E checkpoint \in 0..Min2(high_watermark[r], keep) :
                /\ CrashKeeps(r, keep, checkpoint)
                /\ log' = [log EXCEPT ![r] = Prefix(@, keep)]
                /\ high_watermark' = [high_watermark EXCEPT ![r] = checkpoint]
                \* Loading the log truncates the cache at the recovered log
                \* end offset: the tail entry does not survive a restart.
                /\ epoch_cache_tail' = [epoch_cache_tail EXCEPT ![r] = -1]
                /\ faults' = [faults EXCEPT
                                 !.crash = @ + 1,
                                 !.unclean = IF ~EligibleLeaderReplicasEnable THEN @
                                             ELSE IF keep < Len(log[r]) THEN @ \cup {r}
                                             ELSE @ \ {r}]
    /\ role' = [role EXCEPT ![r] = "Offline"]
    \* r forgets its followers.  Every other leader keeps r's last fetch
    \* offset: no broker learns of a crash before the controller fences it,
    \* so until then a leader's high watermark may count what r held before
    \* it lost its unflushed suffix (as Kafka's does; the fault assumption
    \* above is what makes that safe), and only the broker epoch the fetch
    \* carried keeps it from justifying an ISR expansion after r's restart
    \* (KIP-903, see SendAlterPartition).
    /\ remote_log_end_offset' = [remote_log_end_offset EXCEPT ![r] = Unknown]
    /\ remote_broker_epoch' = [remote_broker_epoch EXCEPT ![r] = Unknown]
    \* A fetch request r sent is on the wire: the leader may still handle
    \* it (LeaderHandleFetch; the answer reaches no one) until r restarts.
    \* An answer on its way to r is lost.
    /\ fetch' = [fetch EXCEPT ![r] = IF @.type = "FetchRequest" THEN @ ELSE NoFetch]
    /\ alter_partition' = [alter_partition EXCEPT ![r] = NoAlterPartition]
    \* The partition metadata a broker applied lives in memory: gone.
    /\ leader_epoch' = [leader_epoch EXCEPT ![r] = -1]
    /\ partition_epoch' = [partition_epoch EXCEPT ![r] = -1]
    /\ isr' = [isr EXCEPT ![r] = {}]
    /\ UNCHANGED <<controller, ghost_vars>>

\* Broker r starts again with what survived on disk and registers with a
\* new broker epoch; a registration of a new incarnation is fenced (if its
\* session had not expired yet, the registration fences it), so r waits
\* for UnfenceBroker.  It acts on the partition only after applying the
\* controller's registration.  KIP-966: a broker that registers after an
\* unclean shutdown leaves the ELR (a partition change: new partition epoch).
Restart(r) ==
    /\ role[r] = "Offline"
    /\ r \in controller.fenced
    /\ role' = [role EXCEPT ![r] = "Online"]
    /\ LET drop == r \in faults.unclean /\ r \in controller.elr
       IN  controller' = Committed([controller EXCEPT !.broker_epoch[r] = @ + 1,
                                            !.elr = IF drop THEN @ \ {r} ELSE @,
                                            !.partition_epoch = IF drop THEN @ + 1 ELSE @,
                                            !.restarted_at[r] = RestartFloor(drop)])
    \* A request of the old process still on the wire is dropped here (a
    \* simplification: one the leader takes after the restart is not modelled).
    /\ fetch' = [fetch EXCEPT ![r] = NoFetch]
    /\ UNCHANGED <<epoch_cache_tail, log, high_watermark, leader_epoch, partition_epoch, isr,
                   remote_log_end_offset, remote_broker_epoch, alter_partition,
                   ghost_vars, faults>>

-----------------------------------------------------------------------------
(* The next-state relation.  Each action is its own disjunct so that TLC  *)
(* names it in counterexamples.  Faults (ShrinkIsr, ElectPreferredLeader,  *)
(* Crash) count themselves in `faults`; MCReplication bounds only those.  *)

Next ==
    \/ \E l \in Replicas, b \in Batches(Values), acks \in AcksModes :
          LeaderAppend(l, b, acks)
    \/ \E l, f \in Replicas : LeaderHandleFetch(l, f)
    \/ \E l \in Replicas : AdvanceHighWatermark(l)
    \/ \E l \in Replicas, out \in SUBSET Replicas : ShrinkIsr(l, out)
    \/ \E l, f \in Replicas : ExpandIsr(l, f)
    \/ \E l \in Replicas : CommitAlterPartition(l)
    \/ \E l \in Replicas : HandleAlterPartitionResponse(l)
    \/ AlterPartitionAnswersLost /\ \E l \in Replicas : AlterPartitionLost(l)
    \/ \E f \in Replicas : FollowerFetch(f)
    \/ \E f \in Replicas : FetchError(f)
    \/ \E f \in Replicas : FollowerAppend(f)
    \/ \E f \in Replicas : TruncateToEpochEndOffset(f)
    \/ \E r \in Replicas : BecomeLeader(r)
    \/ \E r \in Replicas : BecomeFollower(r)
    \/ \E r \in Replicas : ElectLeader(r)
    \/ \E r \in Replicas : ElectPreferredLeader(r)
    \/ \E r \in Replicas : UncleanElectLeader(r)
    \/ UncleanLeaderElectionDynamic /\ \E v \in BOOLEAN : ConfigRecord(v)
    \/ \E r \in Replicas : FenceBroker(r)
    \/ ControlledShutdowns /\ \E r \in Replicas : ControlledShutdown(r)
    \/ \E r \in Replicas : UnfenceBroker(r)
    \/ \E r \in Replicas : Crash(r)
    \/ \E r \in Replicas : Restart(r)
    \* Partition reassignment (its own section)
    \/ ReassignmentEnable /\ \E t \in SUBSET Replicas : AlterPartitionReassignments(t)
    \/ ReassignmentEnable /\ CancelPartitionReassignment
    \/ ReassignmentEnable /\ \E r \in Replicas : StopReplica(r)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* PROPERTIES.  The same names are used by kref's simulator and trace      *)
(* checker (kref/sim invariants), so a violation reads the same everywhere. *)
(***************************************************************************)

Entry == [offset : Nat, leader_epoch : Nat, value : Values]

FetchMessage ==
         {NoFetch}
    \cup [type : {"FetchRequest"}, fetch_offset : Nat,
          last_fetched_epoch : Int, current_leader_epoch : Nat,
          broker_epoch : Nat]
    \cup [type : {"FetchResponse"}, records : Seq(Entry), high_watermark : Nat]
    \cup [type : {"DivergingEpoch"}, epoch : Int, end_offset : Nat]

AlterPartitionRequestMessage ==
    [type : {"AlterPartitionRequest"}, new_isr : SUBSET Replicas,
     leader_epoch : Nat, partition_epoch : Nat,
     \* (a finite range so that TLC can test membership; a model's
     \* broker epochs stay far below it: one per restart)
     broker_epochs : UNION {[S -> 0..Cardinality(Replicas) * 9] :
                              S \in SUBSET Replicas}]

AlterPartitionMessage ==
         {NoAlterPartition}
    \cup AlterPartitionRequestMessage
    \cup [type : {"AlterPartitionResponse"}, new_isr : SUBSET Replicas,
          error : {"NONE", "FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION",
                   "INELIGIBLE_REPLICA", "NEW_LEADER_ELECTED"},
          leader_epoch : Nat, isr : SUBSET Replicas, partition_epoch : Nat,
          request : AlterPartitionRequestMessage]
    \cup [type : {"AwaitMetadata"}, new_isr : SUBSET Replicas]

\* Every variable holds a value of the expected shape; catches spec typos
\* early and documents the state the trace events carry.
TypeOK ==
    /\ role \in [Replicas -> {"Leader", "Follower", "Online", "Offline"}]
    /\ log \in [Replicas -> Seq(Entry)]
    /\ epoch_cache_tail \in [Replicas -> Nat \cup {-1}]
    /\ \A r \in Replicas : \A i \in 1..Len(log[r]) : log[r][i].offset = i - 1
    /\ high_watermark \in [Replicas -> Nat]
    /\ leader_epoch \in [Replicas -> Nat \cup {-1}]
    /\ partition_epoch \in [Replicas -> Nat \cup {-1}]
    /\ isr \in [Replicas -> SUBSET Replicas]
    /\ remote_log_end_offset \in [Replicas -> [Replicas -> Int]]
    /\ remote_broker_epoch \in [Replicas -> [Replicas -> Int]]
    /\ fetch \in [Replicas -> FetchMessage]
    /\ alter_partition \in [Replicas -> AlterPartitionMessage]
    /\ controller \in [leader : Replicas \cup {NoLeader},
                       leader_epoch : Nat \cup {-1},
                       partition_epoch : Nat \cup {-1}, isr : SUBSET Replicas,
                       fenced : SUBSET Replicas,
                       broker_epoch : [Replicas -> Nat], elr : SUBSET Replicas,
                       registrations : SUBSET [leader : Replicas \cup {NoLeader},
                                               leader_epoch : Nat \cup {-1},
                                               partition_epoch : Nat \cup {-1},
                                               isr : SUBSET Replicas,
                                               replicas : SUBSET Replicas],
                       restarted_at : [Replicas -> Nat \cup {-1}],
                       replicas : SUBSET Replicas, adding : SUBSET Replicas,
                       removing : SUBSET Replicas,
                       unclean_leader_election_enable : BOOLEAN]
    /\ controller.isr # {} \/ EligibleLeaderReplicasEnable
    /\ controller.elr \cap controller.isr = {}
    /\ produced \subseteq Values
    /\ acks_all \subseteq produced
    /\ acked \subseteq Entry
    /\ consumed \subseteq Entry
    /\ faults \in [crash : Nat, shrink : Nat, preferred : Nat,
                   unclean : SUBSET Replicas, live_fence : Nat, shutdown : Nat,
                   reassign : Nat]

\* The elected leader is always an ISR member, and a leader's own view of
\* the ISR contains itself: elections and AlterPartition never break this,
\* and HW = min LEO over the ISR is only meaningful if it holds.
LeaderInIsr ==
    /\ controller.leader # NoLeader => controller.leader \in controller.isr
    /\ \A r \in Replicas : role[r] = "Leader" => r \in isr[r]

\* A replica never claims committed data it does not hold; a consumer
\* reading up to the high watermark always finds the records there.
HighWatermarkBelowLogEnd ==
    \A r \in Replicas : high_watermark[r] <= log_end_offset(r)

\* The high watermark never goes back on a replica while it stays leader:
\* records a consumer has read stay readable (Kafka's leader only ever
\* moves it forward, maybeIncrementLeaderHW).  An action property.
MonotonicHighWatermark ==
    [][\A r \in Replicas :
          (role[r] = "Leader" /\ role'[r] = "Leader")
              => high_watermark'[r] >= high_watermark[r]]_vars

\* Replicas agree on every entry below both their high watermarks (what
\* consumers may read is the same everywhere), and two logs holding an entry
\* with the same offset and leader epoch agree on it and everything before
\* it (the KIP-101 epoch-based truncation relies on it).
LogMatching ==
    \A r, s \in Replicas :
        /\ \A i \in 1..Min2(high_watermark[r], high_watermark[s]) :
              log[r][i] = log[s][i]
        /\ \A i \in 1..Min2(Len(log[r]), Len(log[s])) :
              log[r][i].leader_epoch = log[s][i].leader_epoch
                  => Prefix(log[r], i) = Prefix(log[s], i)

InLog(r, e) == e.offset < Len(log[r]) /\ log[r][e.offset + 1] = e

\* The leader the controller elected holds every acknowledged entry: clean
\* election from the ISR is what keeps acks=all promises across failover.
\* (A leader that crashed and is not fenced yet may have lost its suffix;
\* it leads nothing until fencing replaces it.)
LeaderCompleteness ==
    controller.leader # NoLeader /\ role[controller.leader] # "Offline" =>
        \A e \in acked : InLog(controller.leader, e)

\* An acknowledged record survives while one ISR member does: some member
\* of the committed ISR still holds it.  Unclean election breaks this.
NoCommittedRecordLost ==
    \A e \in acked : \E r \in controller.isr : InLog(r, e)

\* A record a consumer may have read (it was below a leader's high
\* watermark) is never lost and never changes, whatever its producer's
\* acks: the elected live leader holds it, and every replica whose high
\* watermark covers its offset holds that very record there.  Stronger than
\* LeaderCompleteness, which covers only acknowledged records of the
\* leader's own epoch; the records between differ (older epochs, acks=1).
NoConsumedRecordLost ==
    \A e \in consumed :
        /\ controller.leader # NoLeader /\ role[controller.leader] # "Offline"
               => InLog(controller.leader, e)
        /\ \A r \in Replicas : e.offset < high_watermark[r] => InLog(r, e)

\* The leader of the current epoch never believes a follower of that epoch
\* has more than its log holds, once the follower's current incarnation
\* fetched (an offset of an incarnation that crashed since may be above
\* what survived: the fault assumption of Crash covers that case): its
\* remote log end offsets are lower bounds, which is what makes the high
\* watermark (their minimum) safe.
\* A leader that kept offsets from an earlier epoch of its own (re-elected
\* without applying the epochs between) may count entries that the
\* follower truncated while following another leader.
FollowerOffsetsBelowLogEnd ==
    \A l \in Replicas :
        /\ role[l] = "Leader"
        /\ controller.leader = l
        /\ leader_epoch[l] = controller.leader_epoch
        => \A f \in Replicas \ {l} :
              (/\ role[f] = "Follower"
               /\ leader_epoch[f] = leader_epoch[l]
               /\ remote_broker_epoch[l][f] = controller.broker_epoch[f])
                  => remote_log_end_offset[l][f] <= Len(log[f])

\* KIP-279: a follower that handled a diverging-epoch answer holds no entry
\* of an epoch newer than the one answered (it truncated to the end of that
\* epoch, or of its own largest epoch below it): else its next fetch sends
\* that newer epoch and diverges again, for ever.  An action property (the
\* step and its answer); before KIP-101 there are no epochs to compare.
TruncationDropsNewerEpochs ==
    [][\A f \in Replicas :
          (fetch[f].type = "DivergingEpoch" /\ fetch'[f].type = "None"
           /\ role[f] = "Follower" /\ role'[f] = "Follower"
           /\ ~TruncateToHighWatermarkOnBecomeFollower)
              => \A i \in 1..Len(log'[f]) : log'[f][i].leader_epoch <= fetch[f].epoch]_vars

\* KIP-841: a fenced broker is not in the committed ISR, except as its last
\* member (without KIP-966 the ISR never becomes empty).  Fencing removes
\* it with a new partition epoch, so an AlterPartition the leader sent
\* before cannot put it back: the partition-epoch check refuses it.
FencedReplicasLeaveIsr ==
    \A r \in controller.fenced : r \in controller.isr => controller.isr = {r}

\* Reassignment (KIP-455): the ISR, the ELR, the leader and the adding and
\* removing replicas are all assigned replicas, so a removed replica is
\* never in the ISR nor elected; no replica leads the controller's current
\* leader epoch unless assigned (a removed leader is a zombie of an older
\* epoch); and an AlterPartition the controller could still commit (of
\* its current epochs) adds only assigned replicas, although the spec's
\* leader does not track the assignment: within a leader epoch the
\* replica set only grows (a removal starts a new epoch).
IsrWithinReplicas ==
    /\ controller.isr \cup controller.elr \cup controller.adding \cup controller.removing
          \subseteq controller.replicas
    /\ controller.adding \cap controller.removing = {}
    /\ controller.leader # NoLeader => controller.leader \in controller.replicas
    /\ \A r \in Replicas :
          /\ (role[r] = "Leader" /\ leader_epoch[r] = controller.leader_epoch)
                => r \in controller.replicas
          /\ (/\ alter_partition[r].type = "AlterPartitionRequest"
              /\ alter_partition[r].leader_epoch = controller.leader_epoch
              /\ alter_partition[r].partition_epoch = controller.partition_epoch)
                => alter_partition[r].new_isr \subseteq controller.replicas
=============================================================================
