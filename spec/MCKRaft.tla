------------------------------- MODULE MCKRaft -------------------------------
(***************************************************************************)
(* Model-checking wrapper for KRaft.tla: the bounds that make the state    *)
(* space finite.  Only disruptive actions are bounded (elections by        *)
(* MaxEpoch, controller writes by MaxBrokerRecords and MaxMetadataRecords, *)
(* crashes and pauses by a count); protocol and recovery actions (votes, fetches, truncation,    *)
(* high watermark, restart, resume) are never bounded, so a bound can hide *)
(* a fault scenario but never make a recovery look impossible.             *)
(*                                                                         *)
(* The safety configurations (MCKRaft*.cfg) check KRaft's own Spec under   *)
(* CONSTRAINT MCBounds, so TLC names each step of a counterexample by its  *)
(* action.  LiveSpec is for MCKRaftLiveness.cfg: see the comment there.    *)
(***************************************************************************)
EXTENDS KRaft, TLC

CONSTANTS
    MaxEpoch,          \* no election timer fires in epoch MaxEpoch
    MaxBrokerRecords,  \* broker records (Register/Fence/Unfence) per log
    MaxMetadataRecords, \* other controller records (AppendMetadata) per log
    MaxSnapshotOffset, \* no snapshot is written past this offset (0: no snapshots)
    MaxCrashes,        \* crashes of voters over a whole behaviour
    MaxPauses,         \* pauses of voters over a whole behaviour
    MaxMessages        \* Vote requests and responses in flight at once (100: no bound)

\* The bounds, as a state constraint (CONSTRAINT MCBounds in every .cfg):
\* a state beyond them is not explored.  Each bound can only be crossed by
\* a disruptive action: an election timeout (RequestVote raises the epoch;
\* other actions only copy an existing epoch), a controller write, a crash
\* or a pause, or a snapshot (CreateSnapshot; InstallSnapshot copies the
\* leader's, which is within the bound already), or a Vote message sent
\* (RequestVote, PreVote, a grant) while MaxMessages are in flight: a bound
\* on the network's buffer, which the models with pre-vote need.  LeaderChange records are bounded by MaxEpoch, not here.
BrokerRecordCount(v) ==
    Cardinality({i \in 1..Len(log[v]) : log[v][i].type \notin {"LeaderChange", "Metadata"}})
MetadataRecordCount(v) ==
    Cardinality({i \in 1..Len(log[v]) : log[v][i].type = "Metadata"})

MCBounds ==
    /\ \A v \in Voters : leader_epoch[v] <= MaxEpoch
    /\ \A v \in Voters : BrokerRecordCount(v) <= MaxBrokerRecords
    /\ \A v \in Voters : MetadataRecordCount(v) <= MaxMetadataRecords
    /\ \A v \in Voters : snapshot_end_offset[v] <= MaxSnapshotOffset
    /\ crash_count <= MaxCrashes
    /\ pause_count <= MaxPauses
    /\ Cardinality(messages) <= MaxMessages

-----------------------------------------------------------------------------
(* Liveness.  Raft elects a leader only under a timing assumption: with     *)
(* randomized election timeouts, eventually one voter whose log can win     *)
(* times out alone and collects its votes before anyone else times out.     *)
(* Without it, split votes may go on for ever (FLP).  ElectionTimeout       *)
(* states that assumption as a guard: it fires only while no live leader    *)
(* exists, only for a voter whose log is at least as up to date as every    *)
(* live voter's, and never while a live candidate (itself included) can     *)
(* still win (the round lasts long enough for the votes to arrive).  It is *)
(* the only way an election starts in LiveSpec (no spurious timeouts, no    *)
(* pauses), crashes stay bounded, and every protocol and recovery action is *)
(* weakly fair.                                                             *)

\* A candidate has lost its election: no majority, no live voter would
\* still grant it a vote, and no grant is on its way to it.
ElectionLost(c) ==
    /\ votes_granted[c] \notin Quorums
    /\ \A w \in Voters : ~VoteGrantable(w, c)
    /\ \A m \in messages : m.type = "VoteResponse" => m.dst # c

ElectionTimeout(v) ==
    /\ leader_epoch[v] < MaxEpoch
    /\ ~\E w \in Voters : Live(w) /\ state[w] = Leader
    /\ \A w \in Voters : Live(w) /\ state[w] = Candidate => ElectionLost(w)
    /\ \A w \in up : LogUpToDate(v, w)
    /\ RequestVote(v)

\* The bounds are guards here, not a CONSTRAINT: a state constraint would
\* cut the step while ENABLED still saw it possible, and weak fairness
\* would then wrongly discard the stuck behaviour instead of reporting it.
LiveNext ==
    \/ \E v \in Voters : ElectionTimeout(v)
    \/ crash_count < MaxCrashes /\ \E v \in Voters : Crash(v)
    \/ ProtocolNext
    \/ RecoveryNext

LiveSpec ==
    /\ Init
    /\ [][LiveNext]_vars
    /\ Fairness
    /\ \A v \in Voters : WF_vars(ElectionTimeout(v))

\* The same behaviours without any fairness: the liveness properties must
\* fail here (a behaviour may stop at any point), which shows that they are
\* not vacuous and that LiveSpec passes because of its fairness.
LiveSpecWithoutFairness == Init /\ [][LiveNext]_vars

\* Once crashes stop, the quorum ends up with a live leader, for good.
EventuallyLeader ==
    <>[](\E v \in Voters : v \in up /\ state[v] = Leader)

\* ... and that leader's whole log, its LeaderChange record included, is
\* eventually committed: the new controller can serve metadata.
EventuallyCommitted ==
    <>[](\E v \in Voters : /\ v \in up /\ state[v] = Leader
                           /\ high_watermark[v] = LogEndOffset(v))

\* ... and every voter ends up holding exactly that leader's log: fetching
\* and the iterated truncation of KIP-595 terminate (an invariant cannot see
\* a follower that truncates to the same offset for ever).
VotersConverge ==
    <>[](\E l \in Voters : /\ l \in up /\ state[l] = Leader
                           /\ \A v \in Voters : v \in up /\ log[v] = log[l])

\* For MCKRaftTruncationLiveness: LiveSpec with only the leader crashing.
\* A follower's or candidate's crash only delays an election, which
\* MCKRaftLiveness covers; what this model needs are two leaders that each
\* crash before their LeaderChange record left them (a tenth of the states
\* of crashing anyone).
LeaderCrashLiveNext ==
    \/ \E v \in Voters : ElectionTimeout(v)
    \/ crash_count < MaxCrashes /\ \E v \in Voters : state[v] = Leader /\ Crash(v)
    \/ ProtocolNext
    \/ RecoveryNext

LeaderCrashLiveSpec ==
    /\ Init
    /\ [][LeaderCrashLiveNext]_vars
    /\ Fairness
    /\ \A v \in Voters : WF_vars(ElectionTimeout(v))

\* For MCKRaftTruncationLivenessFast (default set): LeaderCrashLiveSpec with
\* a leader crashing only while no other voter holds an entry of its epoch
\* (before anyone fetched its LeaderChange record).  That is exactly the
\* crash the truncation scenario needs (see MCKRaftTruncationLiveness.cfg);
\* a leader crash after its record spread leaves no follower holding an
\* epoch its next leader lacks.  MCKRaftTruncationLiveness (full set) keeps
\* every leader crash.
Unreplicated(v) ==
    \A w \in Voters \ {v} : \A i \in 1..Len(log[w]) : log[w][i].epoch # leader_epoch[v]

UnreplicatedLeaderCrashLiveNext ==
    \/ \E v \in Voters : ElectionTimeout(v)
    \/ crash_count < MaxCrashes /\ \E v \in Voters : state[v] = Leader /\ Unreplicated(v) /\ Crash(v)
    \/ ProtocolNext
    \/ RecoveryNext

UnreplicatedLeaderCrashLiveSpec ==
    /\ Init
    /\ [][UnreplicatedLeaderCrashLiveNext]_vars
    /\ Fairness
    /\ \A v \in Voters : WF_vars(ElectionTimeout(v))

\* Follower f diverges from the live leader l of its epoch that it follows.
FollowsDiverging(f, l) ==
    /\ Live(f) /\ Live(l)
    /\ state[f] = Follower /\ leader_id[f] = l
    /\ state[l] = Leader /\ leader_epoch[l] = leader_epoch[f]
    /\ Diverging(f, l)

\* KIP-595's iterated truncation ends: a follower that diverges from its
\* leader eventually no longer does (it truncated to the common prefix, or
\* it stopped following that leader).  Unlike VotersConverge it does not
\* need a leader to be elected in the end, so a model with more crashes
\* than its epoch bound can recover from may check it: the state it is
\* about needs a follower holding an epoch its new leader lacks, which
\* takes two crashes under ElectionTimeout's timing assumption.  A
\* truncation that cuts nothing is a stuttering step, invisible to every
\* invariant and action property: only this kind of property sees it.
\* (Stated as "infinitely often no follower diverges", which TLC checks
\* without a tableau: a leads-to per pair of voters was ten times slower.
\* Disruptions are finite, so in a fair behaviour a divergence that is
\* never resolved is one that lasts for ever, which this forbids.)
TruncationEnds ==
    []<>(\A f, l \in Voters : ~FollowsDiverging(f, l))

\* For MCKRaftFigure8Control and MCKRaftFigure8 (default set, the control
\* and the must-fail model share them): MCBounds and three cuts of the
\* elections (disruptive steps) that Raft's Figure 8 does not need: no log
\* longer than 2 entries (a voter leads at most twice), at most two voters
\* ever win an election, at most one candidate at a time.  The Figure-8
\* behaviour (v1 leads epochs 1 and 3, v2 epochs 2 and 4, one after the
\* other; v1's log [1, 3], v2's [2, 4], v3's [1]) stays inside them, so
\* the commit-rule mutation is caught here as in MCKRaftEpoch4 (full set),
\* which checks every behaviour up to epoch 4.
Figure8Bounds ==
    /\ MCBounds
    /\ \A v \in Voters : Len(log[v]) <= 2
    /\ Cardinality({e.leader : e \in elections}) <= 2
    /\ Cardinality({v \in Voters : state[v] = Candidate}) <= 1

-----------------------------------------------------------------------------
(* Non-vacuity witness (a configuration that MUST FAIL): a zombie        *)
(* controller does write a FenceBroker record after a new leader was      *)
(* elected.  TLC finding this shows that the model reaches the situation  *)
(* NoZombieWrite is about, so that NoZombieWrite passing means something.  *)
ZombieNeverFencesBroker ==
    \A w \in deposed_writes, v \in Voters :
        ~ /\ w.offset < LogEndOffset(v)
          /\ log[v][w.offset + 1].epoch = w.epoch
          /\ log[v][w.offset + 1].type = "FenceBroker"

\* Non-vacuity witness for MCKRaftBrokers (MUST FAIL): some log holds an
\* UnfenceBroker record after a FenceBroker record of the same broker.
BrokerNeverUnfenced ==
    \A v \in Voters : \A i, j \in 1..Len(log[v]) :
        ~ /\ i < j
          /\ log[v][i].type = "FenceBroker"
          /\ log[v][j].type = "UnfenceBroker"
          /\ log[v][i].broker = log[v][j].broker

\* Non-vacuity witness for MCKRaftMetadata (MUST FAIL): no Metadata record
\* (AppendMetadata) is ever committed.
MetadataNeverCommitted ==
    \A i \in 1..Len(committed) : committed[i].entry.type # "Metadata"

\* Non-vacuity witness for MCKRaftBrokers (MUST FAIL): no broker that
\* registered again (a new incarnation) is unfenced after it.
NewIncarnationNeverUnfenced ==
    \A v \in Voters : \A i, j, k \in 1..Len(log[v]) :
        ~ /\ i < j /\ j < k
          /\ log[v][i].type = "RegisterBroker"
          /\ log[v][j].type = "RegisterBroker"
          /\ log[v][k].type = "UnfenceBroker"
          /\ log[v][i].broker = log[v][j].broker
          /\ log[v][j].broker = log[v][k].broker

\* Non-vacuity witness for MCKRaftSnapshot (MUST FAIL): no follower is ever
\* in a position to install its leader's snapshot (InstallSnapshot enabled).
SnapshotNeverInstallable ==
    \A f, l \in Voters : ~ENABLED InstallSnapshot(f, l)

\* ... nor one that must throw away entries it holds beyond the snapshot
\* (its last epoch is older than the one at the leader's log start).
DivergentSnapshotNeverInstallable ==
    \A f, l \in Voters :
        ~ (ENABLED InstallSnapshot(f, l) /\ LogEndOffset(f) > snapshot_end_offset[l])

-----------------------------------------------------------------------------
(* Symmetry: voters are interchangeable (Init treats them alike, no action *)
(* or property names one), and so are brokers.  Used by the safety         *)
(* configurations only: TLC's liveness checking is unsound with SYMMETRY.  *)
Symmetry == Permutations(Voters) \cup Permutations(Brokers)

=============================================================================
