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

FaultBudget ==
    /\ faults.crash <= MaxCrashes
    /\ faults.shrink <= MaxIsrShrinks
    /\ faults.preferred <= MaxPreferredElections

\* Replicas and values are interchangeable: the spec never orders them or
\* picks one by name (Init has no leader yet; CHOOSE is used on numbers
\* only).  Sound only for safety checking, which is all these
\* configurations do; never combine it with a liveness property.
\* Smaller models may override Batches and AcksModes (`Batches <- ...` in a
\* .cfg): one-record batches only, acks=all only.
SingleRecordBatches(S) == {<<v>> : v \in S}
AcksAllOnly == {"all"}

Symmetry == Permutations(Replicas) \cup Permutations(Values)

=============================================================================
