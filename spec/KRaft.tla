-------------------------------- MODULE KRaft --------------------------------
(***************************************************************************)
(* Theory of operation                                                     *)
(*                                                                         *)
(* The KRaft controller quorum (KIP-595, KIP-631) and the broker           *)
(* membership it maintains, as a pull-based Raft:                          *)
(*                                                                         *)
(*  - a voter whose election timer fires bumps the epoch and asks for      *)
(*    votes (RequestVote); with KIP-996 pre-vote (PreVoteEnabled) it first *)
(*    becomes Prospective in its own epoch (PreVote) and stands only once a *)
(*    majority would vote for it (GrantPreVote: no leader it follows, a log *)
(*    no newer than the prospective's); a pre-vote changes no durable     *)
(*    state, so a node cut off from the quorum no longer bumps the epoch   *)
(*    and, on its return, deposes nobody (PreVoteStability);               *)
(*    voters grant at most one vote per epoch and                          *)
(*    only to a candidate whose log is at least as up to date as theirs    *)
(*    (last epoch first, then end offset) (GrantVote);                     *)
(*  - a candidate with a majority becomes the active controller, writes a  *)
(*    LeaderChange control record in its epoch (BecomeActiveController)   *)
(*    and tells the other voters (BeginQuorumEpoch);                       *)
(*  - followers pull: they Fetch from the leader with their log end offset *)
(*    and the epoch of their last entry; the leader either returns records *)
(*    and its high watermark (FetchFromLeader) or a diverging epoch and end *)
(*    offset, after which the follower truncates (TruncateToEpochEndOffset);*)
(*  - the leader moves the high watermark to the largest offset held by a  *)
(*    majority once that offset lies in its own epoch (AdvanceHighWatermark);*)
(*  - the active controller appends RegisterBroker, FenceBroker and        *)
(*    UnfenceBroker records to the metadata log; brokers read the log only *)
(*    up to the high watermark (BrokerFetchMetadata);                      *)
(*  - every other record the controller writes (topic, partition, config,  *)
(*    partition-change and feature records) is one abstract "Metadata"     *)
(*    entry that only the active controller appends (AppendMetadata): to   *)
(*    the quorum it is an entry of the leader's epoch like any other;      *)
(*  - snapshots (KIP-630): a node snapshots its state at a committed       *)
(*    offset (CreateSnapshot) and may then start its log there             *)
(*    (AdvanceLogStart); a follower whose fetch position lies before the   *)
(*    leader's log start (or on another epoch at it) is answered with the  *)
(*    leader's latest snapshot instead of records, fetches it and replaces *)
(*    its whole log with it (InstallSnapshot).  The entries a snapshot     *)
(*    holds stay in log[v] as the abstract prefix the snapshot stands for  *)
(*    (a snapshot is the state after applying exactly them), so every     *)
(*    property keeps its meaning; log_start_offset says which of them the  *)
(*    node can no longer serve as records.                                 *)
(*                                                                         *)
(* Vote and pre-vote RPCs are messages in flight (`messages`: VoteRequest, *)
(* a granted VoteResponse): a voter may handle a request after its         *)
(* candidate moved on, and the candidate counts a grant only while it      *)
(* still stands in that epoch (HandleVoteResponse).  With the switch      *)
(* FetchResponsesInFlight (trace validation) a Fetch answer with records   *)
(* is one too (FetchResponse: SendFetchResponse at the leader,             *)
(* HandleFetchResponse at the follower, possibly after the leader         *)
(* resigned); the models keep it atomic (FetchFromLeader).  Every other RPC is *)
(* one atomic step between two live, unpaused nodes: the request carries   *)
(* the sender's epoch and log position as they are in the pre-state, the   *)
(* response is applied in the same step.  Delayed or lost RPCs are         *)
(* modelled by the step simply not happening (yet); a node that            *)
(* sees a higher epoch in any RPC moves to it (BecomeUnattached).  A paused *)
(* node (Pause, like a long GC pause or SIGSTOP) takes part in no step;    *)
(* when it resumes it still believes what it believed before: a deposed    *)
(* leader that resumes is the "zombie" controller whose writes the epoch   *)
(* must fence (NoZombieWrite).                                             *)
(*                                                                         *)
(* Each action names its post-state completely (no UNCHANGED vars), so     *)
(* that trace validation can match one trace event of the same name onto  *)
(* one action.  Offsets are 0-based as in Kafka: the entry at offset o is  *)
(* log[v][o + 1], the log end offset is Len(log[v]) and the high watermark *)
(* is the exclusive end of the committed prefix.                           *)
(*                                                                         *)
(* The bounds that make the state space finite (epochs, log length,       *)
(* crashes, pauses) are not here but in MCKRaft.tla: this module has the   *)
(* protocol only.  The constant CheckLogUpToDate exists for the must-fail  *)
(* variant: with FALSE, votes ignore the log and LeaderCompleteness breaks.*)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    Voters,            \* node ids of the controller quorum (controller.quorum.voters)
    Brokers,           \* node ids of the brokers that register with the quorum
    Nil,               \* "no node": no vote cast, no known leader
    CheckLogUpToDate,  \* TRUE in Kafka; FALSE only in the must-fail variant
    CommitOnlyOwnEpoch, \* TRUE in Kafka; FALSE: Raft's Figure-8 bug (must fail)
    PreVoteEnabled     \* KIP-996 (Kafka 4, kref): TRUE; FALSE: elections as in KIP-595 alone

\* TRUE: the leader's answer to a Fetch carrying records is a message in
\* flight (SendFetchResponse at the leader, HandleFetchResponse at the
\* follower, which may take it after the leader moved on); FALSE: one
\* atomic step (FetchFromLeader).  Off in the models (it costs states);
\* trace validation turns it on (TraceKRaft.tla, `<-` in its .cfg).
FetchResponsesInFlight == FALSE

ASSUME CheckLogUpToDate \in BOOLEAN
ASSUME CommitOnlyOwnEpoch \in BOOLEAN
ASSUME PreVoteEnabled \in BOOLEAN
ASSUME Nil \notin Voters

Unattached == "Unattached"
Candidate  == "Candidate"
Leader     == "Leader"
Follower   == "Follower"
Resigned   == "Resigned"
Prospective == "Prospective"  \* KIP-996: asking for pre-votes, epoch not bumped
States     == {Unattached, Candidate, Leader, Follower, Resigned, Prospective}

\* Record types in the metadata log.  LeaderChange is the control record a
\* new leader writes at the start of its epoch (KIP-595); RegisterBroker,
\* FenceBroker and UnfenceBroker are the broker-membership records of
\* KIP-631; Metadata stands for every other record the controller writes
\* (TopicRecord, PartitionRecord, PartitionChangeRecord, ConfigRecord,
\* FeatureLevelRecord, ...), whose contents the quorum never reads.
RecordTypes == {"LeaderChange", "RegisterBroker", "FenceBroker", "UnfenceBroker", "Metadata"}

Entry == [epoch : Nat \ {0}, type : RecordTypes, broker : Brokers \cup {Nil}]

VARIABLES
    \* --- persistent per voter (the quorum-state file and the log survive a crash)
    leader_epoch,       \* [Voters -> Nat]   current epoch (the controller epoch)
    voted_for,          \* [Voters -> Voters \cup {Nil}]  vote cast in leader_epoch
    leader_id,          \* [Voters -> Voters \cup {Nil}]  known leader of leader_epoch
    log,                \* [Voters -> Seq(Entry)]   the __cluster_metadata log
    \* --- volatile per voter (lost on Crash)
    state,              \* [Voters -> States]
    high_watermark,     \* [Voters -> Nat]
    end_offsets,        \* [Voters -> [Voters -> Nat]] leader's view of followers' fetch offsets
    votes_granted,      \* [Voters -> SUBSET Voters]   candidate's votes in its epoch
                        \* (a prospective's: the pre-votes granted to it)
    broker_sessions,    \* [Voters -> SUBSET Brokers]  brokers whose heartbeat session is live at this controller
    \* --- persistent per voter: snapshots (KIP-630; the .checkpoint files and the log's start)
    log_start_offset,   \* [Voters -> Nat] first offset the log still holds as records (0: all)
    snapshot_end_offset, \* [Voters -> Nat] end offset of the node's latest snapshot (0: none)
    \* --- environment
    up,                 \* SUBSET Voters: voters whose process is running
    paused,             \* SUBSET Voters: running but stopped (GC pause, SIGSTOP)
    broker_metadata_offset, \* [Brokers -> Nat] how far each broker has applied the metadata log
    messages,           \* the Vote requests and granted Vote responses in flight (a set)
    \* --- history (ghost) variables, read only by the properties
    elections,          \* SUBSET [epoch : Nat, leader : Voters]: every BecomeActiveController
    committed,          \* Seq([entry : Entry, commit_epoch : Nat]): the longest committed prefix ever
    deposed_writes,     \* SUBSET [epoch : Nat, offset : Nat]: entries a leader appended after a
                        \* leader of a higher epoch had already been elected (zombie writes)
    crash_count,        \* crashes so far, and
    pause_count         \* pauses so far: read only by the model's bounds (MCKRaft)

snapshot_vars == <<log_start_offset, snapshot_end_offset>>
raft_vars    == <<leader_epoch, voted_for, leader_id, log, state, high_watermark,
                  end_offsets, votes_granted, snapshot_vars>>
env_vars     == <<broker_sessions, up, paused, broker_metadata_offset, messages>>
history_vars == <<elections, committed, deposed_writes, crash_count, pause_count>>
vars         == <<raft_vars, env_vars, history_vars>>

-----------------------------------------------------------------------------
(* Helpers *)

Quorums == {Q \in SUBSET Voters : 2 * Cardinality(Q) > Cardinality(Voters)}

Max(a, b) == IF a >= b THEN a ELSE b
Min(a, b) == IF a <= b THEN a ELSE b

LogEndOffset(v) == Len(log[v])
LastEpoch(v)    == IF log[v] = << >> THEN 0 ELSE log[v][Len(log[v])].epoch

\* A node that can take part in a step: running and not paused.
Live(v) == v \in up /\ v \notin paused

\* KIP-595 vote rule: the candidate's log is at least as up to date as the
\* voter's, comparing the last epoch first and the end offset second.
LogUpToDate(c, v) ==
    \/ LastEpoch(c) > LastEpoch(v)
    \/ /\ LastEpoch(c) = LastEpoch(v)
       /\ LogEndOffset(c) >= LogEndOffset(v)

\* The leader's answer to OffsetForLeaderEpoch(epoch) on its own log: the
\* largest epoch it has that is <= epoch, and the end offset of that epoch
\* (the number of entries with an epoch <= the asked one, since epochs only
\* grow along a log).
EndOffsetForEpoch(v, epoch) ==
    Cardinality({i \in 1..Len(log[v]) : log[v][i].epoch <= epoch})
EpochAtEndOffset(v, offset) == IF offset = 0 THEN 0 ELSE log[v][offset].epoch

\* Fetch validation on the leader (KIP-595, like KIP-320 for partitions):
\* the follower's (last fetched epoch, fetch offset) must lie on the
\* leader's log, otherwise the leader answers with a diverging epoch.
Diverging(f, l) ==
    LET O == EndOffsetForEpoch(l, LastEpoch(f))
    IN  \/ EpochAtEndOffset(l, O) # LastEpoch(f)
        \/ O < LogEndOffset(f)

\* KIP-630: what follower f needs next is gone from the leader's log, so
\* the leader answers its Fetch with its latest snapshot's id instead of
\* records or a diverging epoch (Kafka's validateOffsetAndEpoch): the fetch
\* offset lies before l's log start, or at it with another last epoch than
\* the snapshot there, or f's last epoch is older than that snapshot's (f
\* diverges inside what l no longer holds as records).
NeedsSnapshot(f, l) ==
    LET start == log_start_offset[l]
        at_start == EpochAtEndOffset(l, start)
    IN  /\ start > 0
        /\ \/ LogEndOffset(f) < start
           \/ LogEndOffset(f) = start /\ LastEpoch(f) # at_start
           \/ LastEpoch(f) < at_start

\* The offset a majority has reached, counting the leader's own log end
\* offset and, for the others, the fetch offset of their last Fetch.
ReplicatedOffset(l, v) == IF v = l THEN LogEndOffset(l) ELSE end_offsets[l][v]
MajorityOffset(l) ==
    CHOOSE n \in 0..LogEndOffset(l) :
        /\ {v \in Voters : ReplicatedOffset(l, v) >= n} \in Quorums
        /\ \A m \in (n + 1)..LogEndOffset(l) :
              {v \in Voters : ReplicatedOffset(l, v) >= m} \notin Quorums

\* Broker membership as the metadata log at node v records it.
BrokerRecords(v, b) == {i \in 1..Len(log[v]) : log[v][i].broker = b}
LastBrokerRecord(v, b) ==
    CHOOSE i \in BrokerRecords(v, b) : \A j \in BrokerRecords(v, b) : j <= i
IsRegistered(v, b) == BrokerRecords(v, b) # {}
IsFenced(v, b) ==
    IsRegistered(v, b) /\ log[v][LastBrokerRecord(v, b)].type # "UnfenceBroker"
\* 0-based offset of the broker's latest RegisterBroker record (its broker
\* epoch: a broker that registers again as a new incarnation gets a new one).
RegistrationOffset(v, b) ==
    (CHOOSE i \in BrokerRecords(v, b) :
        /\ log[v][i].type = "RegisterBroker"
        /\ \A j \in BrokerRecords(v, b) : log[v][j].type = "RegisterBroker" => j <= i) - 1

\* The leader's append, shared by the controller writes.  A leader that
\* appends after a leader of a higher epoch has been elected is a zombie;
\* its write is remembered so that NoZombieWrite can follow it.
Deposed(l) == \E e \in elections : e.epoch > leader_epoch[l]
AppendAsLeader(l, entry) ==
    /\ log' = [log EXCEPT ![l] = Append(@, entry)]
    /\ deposed_writes' =
          IF Deposed(l)
          THEN deposed_writes \cup {[epoch |-> leader_epoch[l], offset |-> LogEndOffset(l)]}
          ELSE deposed_writes

-----------------------------------------------------------------------------
(* Initial state: every voter Unattached in epoch 0 with an empty log. *)

Init ==
    /\ leader_epoch = [v \in Voters |-> 0]
    /\ voted_for = [v \in Voters |-> Nil]
    /\ leader_id = [v \in Voters |-> Nil]
    /\ log = [v \in Voters |-> << >>]
    /\ state = [v \in Voters |-> Unattached]
    /\ high_watermark = [v \in Voters |-> 0]
    /\ end_offsets = [v \in Voters |-> [x \in Voters |-> 0]]
    /\ votes_granted = [v \in Voters |-> {}]
    /\ broker_sessions = [v \in Voters |-> {}]
    /\ log_start_offset = [v \in Voters |-> 0]
    /\ snapshot_end_offset = [v \in Voters |-> 0]
    /\ up = Voters
    /\ paused = {}
    /\ broker_metadata_offset = [b \in Brokers |-> 0]
    /\ messages = {}
    /\ elections = {}
    /\ committed = << >>
    /\ deposed_writes = {}
    /\ crash_count = 0
    /\ pause_count = 0

-----------------------------------------------------------------------------
(* Leader election (KIP-595) *)

(* Votes travel as messages (Kafka's Vote RPC): a candidate's or a         *)
(* prospective's VoteRequest carries its epoch and log position as they    *)
(* were when it sent it; a voter handles it whenever it arrives, possibly  *)
(* after the candidate moved on, and answers with a granted VoteResponse;  *)
(* the candidate counts a grant only while it is still the candidate (or   *)
(* prospective) of that epoch (KafkaRaftClient.handleVoteResponse).  A    *)
(* rejection carries nothing but the voter's epoch, which BecomeUnattached *)
(* covers, so only grants are modelled.                                    *)
(*                                                                         *)
(* `messages` is a set: a request is a broadcast to every voter, delivered *)
(* any number of times (Kafka retries a request to a voter that has not    *)
(* answered); a response is consumed by its receipt.  A message that can   *)
(* no longer change anything is taken out of the set in the step that made *)
(* it so (StaleAfter): a response to a node that left its epoch (or, for a *)
(* vote, stopped being its candidate) would be ignored on arrival, and a   *)
(* request no voter can act on any more would be refused or ignored.      *)
(* Dropping them is the same behaviour as delivering them late and         *)
(* ignoring them, and it keeps the model's states few.  Responses to a     *)
(* node that crashes are lost with its connections.                        *)

VoteRequestMsg(c, e, pre) ==
    [type |-> "VoteRequest", src |-> c, dst |-> Nil, epoch |-> e,
     last_epoch |-> LastEpoch(c), end_offset |-> LogEndOffset(c), pre_vote |-> pre]
VoteResponseMsg(v, c, e, pre) ==
    [type |-> "VoteResponse", src |-> v, dst |-> c, epoch |-> e,
     last_epoch |-> 0, end_offset |-> 0, pre_vote |-> pre]

\* Whether message m is of no use any more after the step, for good: read
\* with the post-state of the step (primed), so Send comes last in an
\* action.  A response: its node left the epoch or, for a vote, is no
\* longer its candidate (a crash drops responses anyway, so a prospective
\* that restarts as the candidate it was loses nothing), or it repeats a
\* grant its node has counted already (a voter answers every copy of a
\* request it receives; the node counts a voter once).  A pre-vote
\* request: its prospective left the epoch (a grant would be ignored; the
\* granter keeps no record), or every other voter did.  A vote request:
\* no other voter can act on it any more: each has passed the epoch, or is
\* in it as a follower, or voted for another candidate, or voted for this
\* one, which cannot stand in that epoch again (it leads, resigned,
\* follows, or passed it), so that a repeated grant would be ignored.
\* One vote per voter and epoch: v, having cast vf[v] in its epoch, may
\* vote for c (again).  One definition for the vote rule and for the
\* pruning that relies on it.
MayVoteFor(vf, v, c) == vf[v] \in {Nil, c}
CouldStand(c, e) == leader_epoch'[c] = e /\ state'[c] \in {Candidate, Prospective, Unattached}
StaleAfter(m) ==
    IF m.type = "VoteResponse"
    THEN \/ leader_epoch'[m.dst] # m.epoch
         \/ ~m.pre_vote /\ state'[m.dst] # Candidate
         \/ m.src \in votes_granted'[m.dst]  \* a repeated grant, already counted
    ELSE IF m.pre_vote
    THEN \/ leader_epoch'[m.src] # m.epoch
         \/ \A v \in Voters \ {m.src} : leader_epoch'[v] > m.epoch
    ELSE \A v \in Voters \ {m.src} :
            \/ leader_epoch'[v] > m.epoch
            \/ /\ leader_epoch'[v] = m.epoch
               /\ \/ state'[v] = Follower
                  \/ ~MayVoteFor(voted_for', v, m.src)
                  \/ voted_for'[v] = m.src /\ ~CouldStand(m.src, m.epoch)
\* A FetchResponse (FetchResponsesInFlight) is of no use once its follower
\* left the epoch or its log no longer ends where the fetch asked from
\* (HandleFetchResponse would not take it).
FetchStaleAfter(m) ==
    \/ leader_epoch'[m.dst] # m.epoch
    \/ Len(log'[m.dst]) # m.end_offset
    \/ (IF log'[m.dst] = << >> THEN 0 ELSE log'[m.dst][Len(log'[m.dst])].epoch) # m.last_epoch
Pruned(msgs) ==
    IF FetchResponsesInFlight
    THEN {m \in msgs : IF m.type = "FetchResponse" THEN ~FetchStaleAfter(m) ELSE ~StaleAfter(m)}
    ELSE {m \in msgs : ~StaleAfter(m)}
Send(new) == messages' = Pruned(messages \cup new)

\* KIP-595 vote rule on a request: the candidate's log, as the request
\* carries it, is at least as up to date as the voter's (last epoch first,
\* then end offset).
RequestUpToDate(m, v) ==
    \/ m.last_epoch > LastEpoch(v)
    \/ /\ m.last_epoch = LastEpoch(v)
       /\ m.end_offset >= LogEndOffset(v)

\* The election timer of c fires (no fetch response from a leader, or a
\* failed election): c becomes a candidate in the next epoch, votes for
\* itself and sends Vote requests.  A disruptive action: MCKRaft bounds it.
\* With pre-vote, only a prospective that a majority would vote for stands.
RequestVote(c) ==
    /\ Live(c)
    /\ state[c] # Leader
    /\ PreVoteEnabled => state[c] = Prospective /\ votes_granted[c] \in Quorums
    /\ leader_epoch' = [leader_epoch EXCEPT ![c] = @ + 1]
    /\ voted_for' = [voted_for EXCEPT ![c] = c]
    /\ leader_id' = [leader_id EXCEPT ![c] = Nil]
    /\ state' = [state EXCEPT ![c] = Candidate]
    /\ votes_granted' = [votes_granted EXCEPT ![c] = {c}]
    /\ log' = log
    /\ high_watermark' = high_watermark
    /\ end_offsets' = end_offsets
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars
    /\ Send({VoteRequestMsg(c, leader_epoch[c] + 1, FALSE)})

\* KIP-996: the election timer of c fires (or a pre-vote round failed) and
\* c becomes Prospective: it asks the voters whether they would vote for it
\* (Vote with pre_vote, carrying its current epoch), counting itself.
\* Nothing durable changes: not the epoch, not the vote, not the known
\* leader (a prospective that hears from its leader follows it again).
PreVote(c) ==
    /\ PreVoteEnabled
    /\ Live(c)
    /\ state[c] # Leader
    /\ state' = [state EXCEPT ![c] = Prospective]
    \* A new round keeps what the last one counted (Kafka's and kref's
    \* prospective do not tell rounds apart; a pre-vote is advisory, no vote).
    /\ votes_granted' = [votes_granted EXCEPT ![c] = IF state[c] = Prospective THEN @ ELSE {c}]
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, high_watermark, end_offsets>>
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars
    \* An earlier round's request of this epoch whose log position the new
    \* one matches or passes adds nothing: whoever would grant it grants the
    \* new one, with the same response.  It is dropped (fewer states).
    /\ LET new == VoteRequestMsg(c, leader_epoch[c], TRUE)
           Dominated(m) ==
               /\ m.type = "VoteRequest" /\ m.pre_vote /\ m.src = c /\ m.epoch = new.epoch
               /\ \/ new.last_epoch > m.last_epoch
                  \/ new.last_epoch = m.last_epoch /\ new.end_offset >= m.end_offset
       IN  messages' = Pruned({m \in messages : ~Dominated(m)} \cup {new})

\* Voter v would grant the pre-vote request m: same epoch (a pre-vote of a
\* higher epoch first moves v there, BecomeUnattached; one of a lower is
\* refused), the prospective's log (as m carries it) at least as up to
\* date, and v has no leader it follows or is: a Follower (kref refuses in
\* that state; Kafka once it fetched from its leader) and a Leader refuse,
\* and so a leader every other voter follows cannot be voted out by one
\* voter that lost touch.  Whether v voted for someone in the epoch does
\* not matter: a pre-vote is no vote.
PreVoteGrantable(v, m) ==
    /\ m.type = "VoteRequest" /\ m.pre_vote
    /\ v # m.src
    /\ Live(v)
    /\ m.epoch = leader_epoch[v]
    /\ state[v] \notin {Leader, Follower}
    /\ CheckLogUpToDate => RequestUpToDate(m, v)  \* as for a vote

\* v grants c's pre-vote: it answers with a granted VoteResponse and keeps
\* no record of it (it may grant again in c's next round).
GrantPreVote(v, c) ==
    /\ \E m \in messages :
          /\ m.src = c
          /\ PreVoteGrantable(v, m)
          /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, state, high_watermark,
                         end_offsets, votes_granted>>
          /\ UNCHANGED snapshot_vars
          /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
          /\ UNCHANGED history_vars
          /\ Send({VoteResponseMsg(v, c, m.epoch, TRUE)})

\* Voter v handles the Vote request m and grants it.  A request with a
\* higher epoch first moves v to that epoch (Unattached, no vote yet).  v
\* grants at most one vote per epoch (again to the same candidate, whose
\* request may come again), never while it follows a leader or leads, and
\* only if the candidate's log is at least as up to date as its own.
RequestGrantable(v, m) ==
    /\ m.type = "VoteRequest" /\ ~m.pre_vote
    /\ v # m.src
    /\ Live(v)
    /\ m.epoch >= leader_epoch[v]
    /\ \/ m.epoch > leader_epoch[v]
       \/ /\ state[v] = Unattached
          /\ MayVoteFor(voted_for, v, m.src)
    /\ CheckLogUpToDate => RequestUpToDate(m, v)

\* v would grant a vote to c in c's current epoch (MCKRaft's liveness).
VoteGrantable(v, c) ==
    \E m \in messages : m.src = c /\ m.epoch = leader_epoch[c] /\ RequestGrantable(v, m)

GrantVote(v, c) ==
    \E m \in messages :
       /\ m.src = c
       /\ RequestGrantable(v, m)
       /\ leader_epoch' = [leader_epoch EXCEPT ![v] = m.epoch]
       /\ voted_for' = [voted_for EXCEPT ![v] = c]
       /\ leader_id' = [leader_id EXCEPT ![v] = Nil]
       /\ state' = [state EXCEPT ![v] = Unattached]
       /\ votes_granted' = [votes_granted EXCEPT ![v] = {}]
       /\ high_watermark' = high_watermark
       /\ end_offsets' = [end_offsets EXCEPT ![v] = [x \in Voters |-> 0]]
       /\ log' = log
       /\ broker_sessions' = [broker_sessions EXCEPT ![v] = {}]
       /\ UNCHANGED snapshot_vars
       /\ UNCHANGED <<up, paused, broker_metadata_offset>>
       /\ UNCHANGED history_vars
       /\ Send({VoteResponseMsg(v, c, m.epoch, FALSE)})

\* Candidate (or prospective) c receives v's granted VoteResponse while it
\* still stands in that epoch, and counts it.  (A response it would ignore
\* was pruned; one for a prospective that follows a leader again waits:
\* it counts if c stands again in the same epoch, as kref's does.)
HandleVoteResponse(c, v) ==
    /\ Live(c)
    /\ \E m \in messages :
          /\ m.type = "VoteResponse" /\ m.dst = c /\ m.src = v
          /\ m.epoch = leader_epoch[c]
          /\ state[c] = IF m.pre_vote THEN Prospective ELSE Candidate
          /\ messages' = messages \ {m}
    /\ votes_granted' = [votes_granted EXCEPT ![c] = @ \cup {v}]
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, state, high_watermark, end_offsets>>
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars

\* A node v learns a higher epoch from any RPC of w (a rejected vote, a
\* fetch, a BeginQuorumEpoch it cannot act on yet) and moves to it,
\* Unattached and without a vote.  This is how a candidate gives up and how
\* a zombie leader finally steps down.  The RPC may have been sent long
\* ago (a Vote request delivered late): v moves to any epoch above its own
\* up to w's, not only to w's epoch of now.  v never was in such an epoch,
\* so it holds no vote there, and votes stay one per voter and epoch.
BecomeUnattached(v, w) ==
    /\ v # w
    /\ Live(v) /\ Live(w)
    /\ leader_epoch[w] > leader_epoch[v]
    /\ \E e \in (leader_epoch[v] + 1)..leader_epoch[w] :
          leader_epoch' = [leader_epoch EXCEPT ![v] = e]
    /\ voted_for' = [voted_for EXCEPT ![v] = Nil]
    /\ leader_id' = [leader_id EXCEPT ![v] = Nil]
    /\ state' = [state EXCEPT ![v] = Unattached]
    /\ votes_granted' = [votes_granted EXCEPT ![v] = {}]
    /\ high_watermark' = high_watermark
    /\ end_offsets' = [end_offsets EXCEPT ![v] = [x \in Voters |-> 0]]
    /\ log' = log
    /\ broker_sessions' = [broker_sessions EXCEPT ![v] = {}]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars
    /\ Send({})

\* A candidate with votes from a majority becomes the leader (the active
\* controller) and appends the LeaderChange control record of its epoch:
\* until that record is committed, it may not advance the high watermark.
\* Every broker gets a fresh heartbeat session (the new controller's
\* heartbeat manager starts with a grace period).
BecomeActiveController(c) ==
    /\ Live(c)
    /\ state[c] = Candidate
    /\ votes_granted[c] \in Quorums
    /\ state' = [state EXCEPT ![c] = Leader]
    /\ leader_id' = [leader_id EXCEPT ![c] = c]
    /\ end_offsets' = [end_offsets EXCEPT ![c] = [x \in Voters |-> 0]]
    /\ votes_granted' = [votes_granted EXCEPT ![c] = {}]
    /\ AppendAsLeader(c, [epoch |-> leader_epoch[c], type |-> "LeaderChange", broker |-> Nil])
    /\ elections' = elections \cup {[epoch |-> leader_epoch[c], leader |-> c]}
    /\ broker_sessions' = [broker_sessions EXCEPT ![c] = Brokers]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, high_watermark>>
    /\ UNCHANGED <<up, paused, broker_metadata_offset, committed, crash_count, pause_count>>
    /\ Send({})

\* The leader l tells voter v about its epoch (BeginQuorumEpoch RPC); v
\* becomes its follower.  A voter in the same epoch that is still a
\* candidate, prospective or unattached (possibly having voted for someone
\* else) learns who won.  The request may arrive late, after l moved on:
\* any epoch l was elected in (elections) that v has not passed yet.
LedEpochs(l) == {x.epoch : x \in {y \in elections : y.leader = l}}
BeginQuorumEpoch(l, v) ==
    /\ v # l
    /\ Live(l) /\ Live(v)
    /\ \E e \in LedEpochs(l) :
       /\ \/ e > leader_epoch[v]
          \/ /\ e = leader_epoch[v]
             /\ state[v] \in {Unattached, Candidate, Prospective}
       /\ leader_epoch' = [leader_epoch EXCEPT ![v] = e]
       /\ voted_for' = [voted_for EXCEPT ![v] = IF e > leader_epoch[v] THEN Nil ELSE @]
    /\ leader_id' = [leader_id EXCEPT ![v] = l]
    /\ state' = [state EXCEPT ![v] = Follower]
    /\ votes_granted' = [votes_granted EXCEPT ![v] = {}]
    /\ high_watermark' = high_watermark
    /\ end_offsets' = [end_offsets EXCEPT ![v] = [x \in Voters |-> 0]]
    /\ log' = log
    /\ broker_sessions' = [broker_sessions EXCEPT ![v] = {}]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars
    /\ Send({})

-----------------------------------------------------------------------------
(* Replication by Fetch (KIP-595) *)

\* Follower f fetches from its leader l with fetch offset = its log end
\* offset and last fetched epoch = the epoch of its last entry, and the
\* leader finds no divergence: f receives every entry it lacks and the
\* leader's high watermark; l records f's fetch offset (what f had
\* *before* this response: l learns about the new entries on f's next fetch).
\* With FetchResponsesInFlight an answer with records is a message
\* (SendFetchResponse, HandleFetchResponse below); one without records
\* (it carries only the high watermark) stays this atomic step, a message
\* taken at once.
FetchUpTo(f, l) == IF FetchResponsesInFlight THEN LogEndOffset(f) ELSE LogEndOffset(l)
FetchFromLeader(f, l) ==
    /\ f # l
    /\ Live(f) /\ Live(l)
    /\ state[f] = Follower /\ leader_id[f] = l
    /\ state[l] = Leader /\ leader_epoch[l] = leader_epoch[f]
    /\ ~NeedsSnapshot(f, l)
    /\ ~Diverging(f, l)
    \* Any prefix of what f lacks, none included (the response is bounded
    \* by max bytes, and the leader may answer before it has more): a
    \* follower can hold an old epoch's entries without the leader's
    \* LeaderChange record, which is what makes the commit rule matter.
    /\ \E upto \in LogEndOffset(f) .. FetchUpTo(f, l) :
          /\ log' = [log EXCEPT ![f] = SubSeq(log[l], 1, upto)]
          /\ high_watermark' = [high_watermark EXCEPT ![f] =
                                   Max(@, Min(high_watermark[l], upto))]
    /\ end_offsets' = [end_offsets EXCEPT ![l][f] = LogEndOffset(f)]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, votes_granted>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED history_vars

\* FetchResponsesInFlight: the same Fetch, its answer a message.  Leader l
\* handles f's Fetch (f's log end offset and last epoch as they are now:
\* the request itself is not modelled in flight), records f's fetch offset
\* and answers, without divergence, with any non-empty prefix of what f
\* lacks and its high watermark, in its epoch (Kafka's
\* KafkaRaftClient.handleFetchRequest).
FetchResponseMsg(l, f, upto) ==
    [type |-> "FetchResponse", src |-> l, dst |-> f, epoch |-> leader_epoch[l],
     last_epoch |-> LastEpoch(f), end_offset |-> LogEndOffset(f), pre_vote |-> FALSE,
     entries |-> SubSeq(log[l], LogEndOffset(f) + 1, upto),
     high_watermark |-> high_watermark[l]]
SendFetchResponse(l, f) ==
    /\ FetchResponsesInFlight
    /\ f # l
    /\ Live(f) /\ Live(l)
    \* KIP-996: a prospective that knows its leader still fetches from it.
    /\ state[f] \in {Follower, Prospective} /\ leader_id[f] = l
    /\ state[l] = Leader /\ leader_epoch[f] = leader_epoch[l]
    /\ ~NeedsSnapshot(f, l)
    /\ ~Diverging(f, l)
    /\ end_offsets' = [end_offsets EXCEPT ![l][f] = LogEndOffset(f)]
    /\ \E upto \in (LogEndOffset(f) + 1) .. LogEndOffset(l) :
          messages' = messages \cup {FetchResponseMsg(l, f, upto)}
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, state, high_watermark, votes_granted>>
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
    /\ UNCHANGED history_vars

\* Follower f takes l's FetchResponse m whenever it arrives, checking it
\* against its state then (KafkaRaftClient.handleFetchResponse): m is of
\* f's epoch (an older one is ignored: pruned, FetchStaleAfter; a newer
\* one moves f first, BecomeUnattached or BeginQuorumEpoch), f follows l,
\* and f's log still ends where its fetch asked from.  It appends the
\* entries and moves its high watermark up to the leader's, within its
\* log.  The leader may have resigned or crashed since it answered.
HandleFetchResponse(f, l) ==
    /\ Live(f)
    /\ state[f] = Follower /\ leader_id[f] = l
    /\ \E m \in messages :
          /\ m.type = "FetchResponse" /\ m.src = l /\ m.dst = f
          /\ m.epoch = leader_epoch[f]
          /\ m.end_offset = LogEndOffset(f) /\ m.last_epoch = LastEpoch(f)
          /\ log' = [log EXCEPT ![f] = @ \o m.entries]
          /\ high_watermark' = [high_watermark EXCEPT ![f] =
                                   Max(@, Min(m.high_watermark, LogEndOffset(f) + Len(m.entries)))]
          /\ UNCHANGED snapshot_vars
          /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, votes_granted, end_offsets>>
          /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset>>
          /\ UNCHANGED history_vars
          /\ messages' = Pruned(messages \ {m})  \* last: Pruned reads the post-state

\* The same Fetch, but the leader answers with a diverging epoch E and its
\* end offset O: f truncates to min(O, its own end offset for epoch E)
\* and fetches again from there (possibly diverging again, one epoch
\* further back each time).
TruncateToEpochEndOffset(f, l) ==
    /\ f # l
    /\ Live(f) /\ Live(l)
    /\ state[f] = Follower /\ leader_id[f] = l
    /\ state[l] = Leader /\ leader_epoch[l] = leader_epoch[f]
    /\ ~NeedsSnapshot(f, l)
    /\ Diverging(f, l)
    /\ LET O == EndOffsetForEpoch(l, LastEpoch(f))
           E == EpochAtEndOffset(l, O)
       IN  log' = [log EXCEPT ![f] = SubSeq(@, 1, Min(O, EndOffsetForEpoch(f, E)))]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, votes_granted,
                   high_watermark, end_offsets>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED history_vars

\* The leader moves its high watermark to the offset held by a majority,
\* but only once that offset lies in its own epoch (the LeaderChange
\* record is replicated): entries of older epochs are committed only
\* indirectly, as in Raft.
AdvanceHighWatermark(l) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ LET n == MajorityOffset(l)
       IN  /\ n > high_watermark[l]
           /\ CommitOnlyOwnEpoch => log[l][n].epoch = leader_epoch[l]
           /\ high_watermark' = [high_watermark EXCEPT ![l] = n]
           /\ committed' =
                 IF n > Len(committed)
                 THEN committed \o
                        [i \in 1..(n - Len(committed)) |->
                           [entry |-> log[l][Len(committed) + i],
                            commit_epoch |-> leader_epoch[l]]]
                 ELSE committed
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, state, end_offsets, votes_granted>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED <<elections, deposed_writes, crash_count, pause_count>>

\* The active controller l appends any other metadata record (a topic
\* created, a partition's leader or isr changed, a config set): one
\* Metadata entry of its epoch.  Only a leader appends, through the same
\* AppendAsLeader as every controller write, so a zombie's write is fenced
\* like any other (NoZombieWrite).
AppendMetadata(l) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ AppendAsLeader(l, [epoch |-> leader_epoch[l], type |-> "Metadata", broker |-> Nil])
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, high_watermark,
                   end_offsets, votes_granted>>
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset, messages, elections, committed,
                   crash_count, pause_count>>

-----------------------------------------------------------------------------
(* Snapshots (KIP-630) *)

\* Node v writes a snapshot of its metadata image at an offset it has
\* applied, which is committed (never past its high watermark), beyond its
\* latest one.  Bounded by MCKRaft (MaxSnapshotOffset), like a controller write.
CreateSnapshot(v) ==
    /\ Live(v)
    /\ \E n \in (snapshot_end_offset[v] + 1)..high_watermark[v] :
          snapshot_end_offset' = [snapshot_end_offset EXCEPT ![v] = n]
    /\ UNCHANGED <<log_start_offset, leader_epoch, voted_for, leader_id, log, state,
                   high_watermark, end_offsets, votes_granted>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED history_vars

\* Retention (metadata.max.retention.bytes/.ms): v's log now starts at its
\* latest snapshot; the records before it are deleted and only the snapshot
\* serves them.
AdvanceLogStart(v) ==
    /\ Live(v)
    /\ log_start_offset[v] < snapshot_end_offset[v]
    /\ log_start_offset' = [log_start_offset EXCEPT ![v] = snapshot_end_offset[v]]
    /\ UNCHANGED <<snapshot_end_offset, leader_epoch, voted_for, leader_id, log, state,
                   high_watermark, end_offsets, votes_granted>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED history_vars

\* Follower f's Fetch is answered with l's latest snapshot id (NeedsSnapshot);
\* f fetches it (FetchSnapshot, chunk by chunk: one atomic step here, like
\* every RPC) and installs it: its whole log is replaced by the snapshot
\* (truncated fully to the snapshot's end offset, whatever it held beyond),
\* its log starts there and its high watermark moves to it.  A snapshot
\* below f's high watermark is refused (no step).  The leader learns
\* nothing about f's position from it (end_offsets unchanged).
InstallSnapshot(f, l) ==
    /\ f # l
    /\ Live(f) /\ Live(l)
    /\ state[f] = Follower /\ leader_id[f] = l
    /\ state[l] = Leader /\ leader_epoch[l] = leader_epoch[f]
    /\ NeedsSnapshot(f, l)
    /\ LET S == snapshot_end_offset[l] IN
       /\ S >= high_watermark[f]
       /\ log' = [log EXCEPT ![f] = SubSeq(log[l], 1, S)]
       /\ high_watermark' = [high_watermark EXCEPT ![f] = S]
       /\ log_start_offset' = [log_start_offset EXCEPT ![f] = S]
       /\ snapshot_end_offset' = [snapshot_end_offset EXCEPT ![f] = S]
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, end_offsets, votes_granted>>
    /\ UNCHANGED env_vars
    /\ UNCHANGED history_vars

-----------------------------------------------------------------------------
(* Broker membership (KIP-631) *)

\* BrokerRegistration: broker b registers with the active controller l,
\* which appends a RegisterBroker record; a new broker starts fenced.  A
\* registered broker registers again when its process restarted (a new
\* incarnation, which gets a new broker epoch and starts fenced again) once
\* the old incarnation's session at l is over; until then the controller
\* refuses it (DUPLICATE_BROKER_REGISTRATION: no step).  The old
\* incarnation's heartbeats are refused once the new one registered
\* (STALE_BROKER_EPOCH: no step either).
RegisterBroker(l, b) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ ~IsRegistered(l, b) \/ b \notin broker_sessions[l]
    /\ AppendAsLeader(l, [epoch |-> leader_epoch[l], type |-> "RegisterBroker", broker |-> b])
    /\ broker_sessions' = [broker_sessions EXCEPT ![l] = @ \cup {b}]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, high_watermark,
                   end_offsets, votes_granted>>
    /\ UNCHANGED <<up, paused, broker_metadata_offset, messages, elections, committed,
                   crash_count, pause_count>>

\* BrokerHeartbeat from b reaches l, which believes it is the active
\* controller: b's session at l is live again.  (The heartbeat also carries
\* b's metadata offset, which UnfenceBroker reads.)
BrokerHeartbeat(b, l) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ IsRegistered(l, b)
    /\ b \notin broker_sessions[l]
    /\ broker_sessions' = [broker_sessions EXCEPT ![l] = @ \cup {b}]
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<up, paused, broker_metadata_offset, messages>>
    /\ UNCHANGED history_vars

\* b's heartbeat session at l has expired: l appends a FenceBroker record.
FenceBroker(l, b) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ IsRegistered(l, b) /\ ~IsFenced(l, b)
    /\ b \notin broker_sessions[l]
    /\ AppendAsLeader(l, [epoch |-> leader_epoch[l], type |-> "FenceBroker", broker |-> b])
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, high_watermark,
                   end_offsets, votes_granted>>
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset, messages, elections, committed,
                   crash_count, pause_count>>

\* b's heartbeats stop reaching l (the broker died, or a partition) for
\* broker.session.timeout.ms: its session at l expires.  Disruptive: no
\* fairness; it is what lets FenceBroker happen without a paused leader.
ExpireBrokerSession(l, b) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ b \in broker_sessions[l]
    /\ broker_sessions' = [broker_sessions EXCEPT ![l] = @ \ {b}]
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<up, paused, broker_metadata_offset, messages>>
    /\ UNCHANGED history_vars

\* b heartbeats and has caught up with the metadata log past its own
\* registration: l appends an UnfenceBroker record.
UnfenceBroker(l, b) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ IsFenced(l, b)
    /\ b \in broker_sessions[l]
    /\ broker_metadata_offset[b] > RegistrationOffset(l, b)
    /\ AppendAsLeader(l, [epoch |-> leader_epoch[l], type |-> "UnfenceBroker", broker |-> b])
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, state, high_watermark,
                   end_offsets, votes_granted>>
    /\ UNCHANGED <<broker_sessions, up, paused, broker_metadata_offset, messages, elections, committed,
                   crash_count, pause_count>>

\* Controlled shutdown (KIP-631): b heartbeats with want_shut_down; l moves
\* b's leaderships away and takes it out of every isr (Metadata records,
\* AppendMetadata), and once b has caught up answers should_shut_down and
\* fences it (FenceBroker).  To the quorum it is b's session ending on b's
\* own request rather than by a timeout: the same step as
\* ExpireBrokerSession, taken only while b is registered and unfenced.
ControlledShutdown(l, b) ==
    /\ IsRegistered(l, b) /\ ~IsFenced(l, b)
    /\ ExpireBrokerSession(l, b)

\* Broker b fetches the metadata log from l (a node that believes it is the
\* leader) and applies it up to l's high watermark, never beyond.
BrokerFetchMetadata(b, l) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ high_watermark[l] > broker_metadata_offset[b]
    /\ broker_metadata_offset' = [broker_metadata_offset EXCEPT ![b] = high_watermark[l]]
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<broker_sessions, up, paused, messages>>
    /\ UNCHANGED history_vars

-----------------------------------------------------------------------------
(* Faults *)

\* The process stops.  Log, epoch, vote, known leader and snapshots are on
\* disk (KRaft fsyncs the log before acknowledging and keeps them in the
\* quorum-state file); the high watermark restarts at the latest snapshot's
\* end (kref's QuorumCore.restore); everything else is lost.  The restarted node comes
\* back as QuorumState.initialize reads quorum-state: Resigned if it was
\* the leader (it may not resume leadership of that epoch), Follower if it
\* knew a leader, Candidate (votes to collect again) if it had voted for
\* itself, else Unattached.  We set that state at once, since a node that
\* is down takes no step anyway.
RestartState(v) ==
    IF leader_id[v] = v THEN Resigned
    ELSE IF leader_id[v] # Nil THEN Follower
    ELSE IF voted_for[v] = v THEN Candidate
    ELSE Unattached

Crash(v) ==
    /\ v \in up
    /\ up' = up \ {v}
    /\ paused' = paused \ {v}
    /\ state' = [state EXCEPT ![v] = RestartState(v)]
    \* What its latest snapshot holds is committed: the node starts there.
    /\ high_watermark' = [high_watermark EXCEPT ![v] = snapshot_end_offset[v]]
    /\ end_offsets' = [end_offsets EXCEPT ![v] = [x \in Voters |-> 0]]
    /\ votes_granted' = [votes_granted EXCEPT ![v] =
                            IF RestartState(v) = Candidate THEN {v} ELSE {}]
    /\ broker_sessions' = [broker_sessions EXCEPT ![v] = {}]
    /\ UNCHANGED snapshot_vars
    \* Responses on their way to v are lost with its connections.
    /\ messages' = {m \in messages : m.dst # v}
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, broker_metadata_offset>>
    /\ crash_count' = crash_count + 1
    /\ UNCHANGED <<elections, committed, deposed_writes, pause_count>>

Restart(v) ==
    /\ v \notin up
    /\ up' = up \cup {v}
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<broker_sessions, paused, broker_metadata_offset, messages>>
    /\ UNCHANGED history_vars

\* The process of the active controller is stopped without dying (a long
\* GC pause, SIGSTOP, a frozen VM): it answers nothing, and its
\* clock-driven state (heartbeat sessions) will look expired on Resume.
\* Only a leader is paused: any other node that pauses behaves exactly like
\* a node that is slow to take its next step, which the interleaving of
\* steps covers already.
Pause(v) ==
    /\ Live(v)
    /\ state[v] = Leader
    /\ paused' = paused \cup {v}
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<broker_sessions, up, broker_metadata_offset, messages>>
    /\ pause_count' = pause_count + 1
    /\ UNCHANGED <<elections, committed, deposed_writes, crash_count>>

\* The leader resigns gracefully (controlled shutdown, or it is no longer a
\* voter): it becomes Resigned in its epoch and will not lead it again.
\* Disruptive: MCKRaft bounds it with the pauses.
Resign(l) ==
    /\ Live(l)
    /\ state[l] = Leader
    /\ state' = [state EXCEPT ![l] = Resigned]
    /\ broker_sessions' = [broker_sessions EXCEPT ![l] = {}]
    /\ UNCHANGED snapshot_vars
    /\ UNCHANGED <<leader_epoch, voted_for, leader_id, log, high_watermark,
                   end_offsets, votes_granted>>
    /\ UNCHANGED <<up, paused, broker_metadata_offset, messages>>
    /\ pause_count' = pause_count + 1
    /\ UNCHANGED <<elections, committed, deposed_writes, crash_count>>

\* The resigned leader l sends EndQuorumEpoch to its follower v (KIP-595):
\* v does not wait for its fetch timeout and stands for election at once.
EndQuorumEpoch(l, v) ==
    /\ l # v
    /\ Live(l)
    /\ state[l] = Resigned
    /\ state[v] = Follower /\ leader_id[v] = l
    /\ leader_epoch[v] = leader_epoch[l]
    /\ IF PreVoteEnabled THEN PreVote(v) ELSE RequestVote(v)

\* The process continues where it stopped, unaware of the time that passed:
\* every broker's heartbeat session at v has timed out.
Resume(v) ==
    /\ v \in paused
    /\ paused' = paused \ {v}
    /\ broker_sessions' = [broker_sessions EXCEPT ![v] = {}]
    /\ UNCHANGED raft_vars
    /\ UNCHANGED <<up, broker_metadata_offset, messages>>
    /\ UNCHANGED history_vars

-----------------------------------------------------------------------------
(* Next state.  Disruptive actions (RequestVote, controller writes, Crash,
   Pause) are listed apart; MCKRaft bounds them with a state constraint.
   Protocol and recovery actions are never bounded. *)

ControllerWrite(l) ==
    \/ AppendMetadata(l)
    \/ \E b \in Brokers : \/ RegisterBroker(l, b) \/ FenceBroker(l, b) \/ UnfenceBroker(l, b)
                         \/ ExpireBrokerSession(l, b) \/ ControlledShutdown(l, b)

ProtocolNext ==
    \/ \E v, c \in Voters : GrantVote(v, c) \/ BecomeUnattached(v, c) \/ GrantPreVote(v, c)
                            \/ HandleVoteResponse(c, v)
    \/ \E c \in Voters : BecomeActiveController(c)
    \/ \E l, v \in Voters : BeginQuorumEpoch(l, v)
    \/ \E f, l \in Voters : FetchFromLeader(f, l) \/ TruncateToEpochEndOffset(f, l)
    \/ FetchResponsesInFlight /\ \E f, l \in Voters : SendFetchResponse(l, f) \/ HandleFetchResponse(f, l)
    \/ \E l \in Voters : AdvanceHighWatermark(l)
    \/ \E b \in Brokers, l \in Voters : BrokerHeartbeat(b, l) \/ BrokerFetchMetadata(b, l)

RecoveryNext ==
    \E v \in Voters : Restart(v) \/ Resume(v)

\* Snapshots, apart so that the liveness models (LiveNext) stay without them.
SnapshotNext ==
    \/ \E v \in Voters : CreateSnapshot(v) \/ AdvanceLogStart(v)
    \/ \E f, l \in Voters : InstallSnapshot(f, l)

Next ==
    \/ \E v \in Voters : RequestVote(v) \/ PreVote(v) \/ Crash(v) \/ Pause(v) \/ Resign(v)
                        \/ ControllerWrite(v)
    \/ \E l, v \in Voters : EndQuorumEpoch(l, v)
    \/ ProtocolNext
    \/ RecoveryNext
    \/ SnapshotNext

\* Weak fairness on every protocol and recovery step: a step that stays
\* possible eventually happens.  No fairness on disruptive steps.
Fairness ==
    /\ \A v, c \in Voters : WF_vars(GrantVote(v, c)) /\ WF_vars(BecomeUnattached(v, c))
                            /\ WF_vars(GrantPreVote(v, c)) /\ WF_vars(HandleVoteResponse(c, v))
    /\ \A c \in Voters : WF_vars(BecomeActiveController(c))
    /\ \A l, v \in Voters : WF_vars(BeginQuorumEpoch(l, v))
    /\ \A f, l \in Voters : WF_vars(FetchFromLeader(f, l)) /\ WF_vars(TruncateToEpochEndOffset(f, l))
    /\ \A l \in Voters : WF_vars(AdvanceHighWatermark(l))
    /\ \A v \in Voters : WF_vars(Restart(v)) /\ WF_vars(Resume(v))

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Properties *)

\* Every variable keeps its shape: guards against a typo in an action that
\* would make every other property vacuous or meaningless.
TypeOK ==
    /\ leader_epoch \in [Voters -> Nat]
    /\ voted_for \in [Voters -> Voters \cup {Nil}]
    /\ leader_id \in [Voters -> Voters \cup {Nil}]
    /\ \A v \in Voters : log[v] \in Seq(Entry)
    /\ state \in [Voters -> States]
    /\ high_watermark \in [Voters -> Nat]
    /\ \A v \in Voters : end_offsets[v] \in [Voters -> Nat]
    /\ votes_granted \in [Voters -> SUBSET Voters]
    /\ broker_sessions \in [Voters -> SUBSET Brokers]
    /\ up \subseteq Voters /\ paused \subseteq up
    /\ crash_count \in Nat /\ pause_count \in Nat
    /\ broker_metadata_offset \in [Brokers -> Nat]
    /\ \A m \in messages : /\ m.type \in {"VoteRequest", "VoteResponse", "FetchResponse"}
                          /\ m.src \in Voters /\ m.dst \in Voters \cup {Nil}
                          /\ m.epoch \in Nat /\ m.pre_vote \in BOOLEAN
    /\ log_start_offset \in [Voters -> Nat] /\ snapshot_end_offset \in [Voters -> Nat]
    /\ \A v \in Voters : high_watermark[v] <= LogEndOffset(v)

\* At most one leader per epoch, over the whole history.  Everything that
\* fences by epoch (fetch validation, the controller epoch on metadata
\* writes) assumes an epoch names one leader.
ElectionSafety ==
    \A x, y \in elections : x.epoch = y.epoch => x.leader = y.leader

\* A voter's current epoch covers its log: it never holds an entry of an
\* epoch it has not entered.  Kafka's leader refuses a Fetch whose last
\* fetched epoch is above the fetch's current leader epoch (INVALID_REQUEST),
\* and the vote rule compares (last epoch, end offset) against the epoch in
\* the quorum-state file; a follower that took records from a leader of
\* another epoch would break both.  (Raft: currentTerm >= the last log term.)
EpochCoversLog ==
    \A v \in Voters : LastEpoch(v) <= leader_epoch[v]

\* Two logs that hold an entry of the same epoch at the same offset agree on
\* every entry up to it.  This is what lets a single (epoch, offset) pair in
\* a Fetch stand for a whole log prefix.
LogMatching ==
    \A v, w \in Voters :
        \A i \in 1..Min(LogEndOffset(v), LogEndOffset(w)) :
            log[v][i].epoch = log[w][i].epoch =>
                SubSeq(log[v], 1, i) = SubSeq(log[w], 1, i)

\* Every leader holds every entry committed in an epoch before its own.
\* Without it a new active controller would replay a metadata log missing
\* records that brokers already applied.
LeaderCompleteness ==
    \A v \in Voters :
        state[v] = Leader =>
            \A i \in 1..Len(committed) :
                committed[i].commit_epoch < leader_epoch[v] =>
                    /\ i <= LogEndOffset(v)
                    /\ log[v][i] = committed[i].entry

\* A committed entry stays on a majority of voters for ever (logs are
\* fsynced, so a crash loses none), and what any voter exposes below its
\* high watermark, or any broker has applied, is exactly the committed log.
CommittedEntriesNeverLost ==
    /\ \A i \in 1..Len(committed) :
          \E Q \in Quorums : \A v \in Q :
              i <= LogEndOffset(v) /\ log[v][i] = committed[i].entry
    /\ \A v \in Voters :
          /\ high_watermark[v] <= Len(committed)
          /\ \A i \in 1..high_watermark[v] :
                i <= LogEndOffset(v) /\ log[v][i] = committed[i].entry
    /\ \A b \in Brokers : broker_metadata_offset[b] <= Len(committed)

\* A snapshot holds only committed entries, and the log a node keeps never
\* loses what its snapshots hold: the log starts at or before the latest
\* snapshot, which ends within the log, on the committed prefix.  (A node
\* asked to truncate below its snapshot, or a leader serving a snapshot of
\* uncommitted entries, breaks it.)
SnapshotsCommitted ==
    \A v \in Voters :
        /\ log_start_offset[v] <= snapshot_end_offset[v]
        /\ snapshot_end_offset[v] <= LogEndOffset(v)
        /\ snapshot_end_offset[v] <= Len(committed)
        /\ \A i \in 1..snapshot_end_offset[v] : log[v][i] = committed[i].entry

\* A deposed controller that resumes (a zombie) may still append records in
\* its old epoch, e.g. FenceBroker for every broker whose heartbeats it
\* missed while paused.  The epoch must fence them: no node in that old
\* epoch ever counts such a record as committed, so it is never
\* acknowledged or handed to brokers as the zombie's decision.  (A later
\* leader of a higher epoch may still adopt the entry into its own log and
\* commit it indirectly, as Raft allows; it is then that leader's log, and
\* consistent with the prefix it follows.)
NoZombieWrite ==
    \A w \in deposed_writes, v \in Voters :
        /\ leader_epoch[v] = w.epoch
        /\ w.offset < LogEndOffset(v)
        /\ log[v][w.offset + 1].epoch = w.epoch
        => high_watermark[v] <= w.offset

\* KIP-996's point: while leader l is live and every other voter follows it
\* in its epoch, one voter c whose timer fired (cut off from l: a network
\* partition, a long pause) cannot raise any epoch; it stays Prospective
\* in l's epoch and follows l again once it hears from it.  Without
\* pre-vote (PreVoteEnabled = FALSE) c's RequestVote breaks it at once, and
\* c's higher epoch would then depose l on c's return (MCKRaftNoPreVote).
\* Nor does any voter grant c (or anyone) a pre-vote meanwhile: a follower
\* of a live leader and the leader refuse (KIP-996's rule; without it a
\* follower's grant would let c stand, one step later): no granted Vote
\* response is sent but by c itself (a prospective may grant a pre-vote
\* request that another voter sent before it followed l, delivered late).
\* That half holds whatever grants c kept, counted or still in flight,
\* from before l's election (a prospective counts grants across rounds),
\* which is why the epoch half asks for none.
FollowedByAllBut(l, c) ==
    /\ Live(l) /\ state[l] = Leader
    /\ \A v \in Voters \ {l} :
          /\ leader_epoch[v] = leader_epoch[l]
          /\ leader_id[v] = l
          /\ \/ state[v] = Follower
             \/ v = c /\ state[v] = Prospective
ServedByAllBut(l, c) ==
    /\ FollowedByAllBut(l, c)
    /\ state[c] = Prospective => votes_granted[c] = {c}
    /\ \A m \in messages : m.type = "VoteResponse" => m.dst # c
PreVoteStability ==
    [][\A l, c \in Voters :
          /\ ServedByAllBut(l, c) => \A v \in Voters : leader_epoch'[v] = leader_epoch[v]
          /\ FollowedByAllBut(l, c) =>
                \A m \in messages' \ messages : m.type = "VoteResponse" => m.src = c]_vars

=============================================================================
