---------------------------- MODULE MCReplication ----------------------------
(***************************************************************************)
(* Model-checking wrapper for Replication.tla.  It bounds only the         *)
(* disruptive actions (Crash, ShrinkIsr, ElectPreferredLeader), each by    *)
(* its own budget, through a state constraint on the spec's `faults`       *)
(* counter; the actions that recover from faults are never bounded, so    *)
(* every fault can be followed by the whole recovery.  Producing is        *)
(* bounded by Values (each value is sent once).                            *)
(* The pre-KIP-101 and unclean-election variants are configurations of    *)
(* this same module (MCReplication*.cfg) that flip one constant of the    *)
(* spec, not copies of it.                                                 *)
(***************************************************************************)
EXTENDS Replication, TLC

CONSTANTS MaxCrashes, MaxIsrShrinks, MaxPreferredElections

\* Fencings of a broker that is up (Replication's LiveBrokerFencing): none
\* unless a .cfg says `MaxLiveFences <- One` (or Two; a definition, so that the
\* configurations that predate it need no new constant).
MaxLiveFences == 0
\* Controlled shutdowns (Replication's ControlledShutdowns): none unless a
\* .cfg says `MaxControlledShutdowns <- One` (or Two).
MaxControlledShutdowns == 0
One == 1
Two == 2

\* Reassignments (AlterPartitionReassignments, CancelPartitionReassignment):
\* none unless a .cfg says `MaxReassignments <- One` (or Two).
MaxReassignments == 0

FaultBudget ==
    /\ faults.crash <= MaxCrashes
    /\ faults.shrink <= MaxIsrShrinks
    /\ faults.preferred <= MaxPreferredElections
    /\ faults.live_fence <= MaxLiveFences
    /\ faults.shutdown <= MaxControlledShutdowns
    /\ faults.reassign <= MaxReassignments

\* Replica sets a partition of a reassignment model is created with
\* (`ReplicaSetsAtCreation <- OneReplicaAtCreation` in a .cfg): every set
\* of that size, so that the symmetry of Replicas still holds.
OneReplicaAtCreation == {{r} : r \in Replicas}
TwoReplicasAtCreation == {S \in SUBSET Replicas : Cardinality(S) = 2}

\* Replicas and values are interchangeable: the spec never orders them or
\* picks one by name (Init has no leader yet; CHOOSE is used on numbers
\* only).  Sound only for safety checking, which is all these
\* configurations do; never combine it with a liveness property.
-----------------------------------------------------------------------------
(* Liveness.  Faults (Crash, ShrinkIsr, ElectPreferredLeader) and produce  *)
(* are bounded by guards here, not by a CONSTRAINT (a constraint would cut *)
(* a step that ENABLED still sees, and weak fairness would then discard   *)
(* the stuck behaviour instead of reporting it).  Every recovery action is *)
(* weakly fair; none of the faults is.  A fetch may be answered with no    *)
(* records any number of times, so the answer with everything the leader   *)
(* has is strongly fair: a follower that keeps asking eventually gets it.  *)

LiveNext ==
    \/ \E l \in Replicas, b \in Batches(Values), acks \in AcksModes :
          LeaderAppend(l, b, acks)
    \/ \E l, f \in Replicas : LeaderHandleFetch(l, f)
    \/ \E l \in Replicas : AdvanceHighWatermark(l)
    \/ faults.shrink < MaxIsrShrinks
       /\ \E l \in Replicas, out \in SUBSET Replicas : ShrinkIsr(l, out)
    \/ \E l, f \in Replicas : ExpandIsr(l, f)
    \/ \E l \in Replicas : CommitAlterPartition(l)
    \/ \E l \in Replicas : HandleAlterPartitionResponse(l)
    \/ \E f \in Replicas : FollowerFetch(f) \/ FetchError(f) \/ FollowerAppend(f)
                           \/ TruncateToEpochEndOffset(f)
    \/ \E r \in Replicas : BecomeLeader(r) \/ BecomeFollower(r) \/ ElectLeader(r)
                           \/ UncleanElectLeader(r) \/ FenceBroker(r)
                           \/ UnfenceBroker(r) \/ Restart(r)
    \/ faults.preferred < MaxPreferredElections
       /\ \E r \in Replicas : ElectPreferredLeader(r)
    \/ faults.crash < MaxCrashes /\ \E r \in Replicas : Crash(r)

\* The fetch answer that carries everything the leader has.
FullFetchAnswer(l, f) ==
    /\ LeaderHandleFetch(l, f)
    /\ fetch'[f].type = "FetchResponse" =>
          Len(fetch'[f].records) = Len(log[l]) - fetch[f].fetch_offset

Fairness ==
    /\ \A l, f \in Replicas : /\ WF_vars(LeaderHandleFetch(l, f))
                             /\ SF_vars(FullFetchAnswer(l, f))
                             /\ WF_vars(ExpandIsr(l, f))
    /\ \A l \in Replicas : /\ WF_vars(AdvanceHighWatermark(l))
                          /\ WF_vars(CommitAlterPartition(l))
                          /\ WF_vars(HandleAlterPartitionResponse(l))
    /\ \A r \in Replicas : /\ WF_vars(FollowerFetch(r)) /\ WF_vars(FetchError(r))
                          /\ WF_vars(FollowerAppend(r))
                          /\ WF_vars(TruncateToEpochEndOffset(r))
                          /\ WF_vars(BecomeLeader(r)) /\ WF_vars(BecomeFollower(r))
                          /\ WF_vars(ElectLeader(r)) /\ WF_vars(FenceBroker(r))
                          /\ WF_vars(UnfenceBroker(r)) /\ WF_vars(Restart(r))

LiveSpec == Init /\ [][LiveNext]_vars /\ Fairness

\* The same behaviours without fairness: the properties below must fail
\* here (a behaviour may stop anywhere), so passing them under LiveSpec is
\* due to fairness, not vacuous.
LiveSpecWithoutFairness == Init /\ [][LiveNext]_vars

\* An acknowledged record eventually reaches every live ISR member.
AckedRecordReachesIsr ==
    \A v \in Values :
        (\E e \in acked : e.value = v)
            ~> (\E e \in acked : e.value = v
                   /\ \A r \in controller.isr : role[r] # "Offline" => InLog(r, e))

\* Once faults and producers stop, the replicas converge: every replica is
\* up, there is a leader, and every log is the leader's log for good.
ReplicasConverge ==
    <>[](/\ controller.leader # NoLeader
         /\ \A r \in Replicas : /\ role[r] # "Offline"
                                /\ log[r] = log[controller.leader])

\* ... and the leader's high watermark catches up with its log end offset.
HighWatermarkCatchesUp ==
    <>[](/\ controller.leader # NoLeader
         /\ role[controller.leader] = "Leader"
         /\ high_watermark[controller.leader] = Len(log[controller.leader]))

-----------------------------------------------------------------------------
\* Smaller models may override Batches and AcksModes (`Batches <- ...` in a
\* .cfg): one-record batches only, acks=all only.
SingleRecordBatches(S) == {<<v>> : v \in S}
AcksAllOnly == {"all"}

\* Non-vacuity witness for MCReplicationElr (MUST FAIL): an acknowledged
\* record is held by no ISR member but by an ELR member, the very state
\* KIP-966 exists for.  TLC finding it shows that the ELR model does reach
\* it, so that LeaderCompleteness passing there means something.
NoRecordOnlyInElr ==
    \A e \in acked : (\E r \in controller.isr : InLog(r, e))
                     \/ ~\E r \in controller.elr : InLog(r, e)

\* A smaller state space for models about what happens up to and just after
\* a crash (a state constraint, safety only): the crashed broker never
\* registers again, so restart, unfencing and rejoining are not explored.
CrashedStayDown == \A r \in Replicas : controller.broker_epoch[r] = 0

\* For turning on Replication.tla's switches from a .cfg
\* (`LastReplicaStandingFaults <- On`, `EligibleLeaderReplicasEnable <- On`).
On == TRUE

Symmetry == Permutations(Replicas) \cup Permutations(Values)

=============================================================================
