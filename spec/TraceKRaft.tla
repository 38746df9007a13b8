----------------------------- MODULE TraceKRaft -----------------------------
(***************************************************************************)
(* Theory of operation.                                                    *)
(*                                                                         *)
(* Trace validation of the KRaft controller quorum against spec/KRaft.tla: *)
(* is what the voters of a real quorum logged (NDJSON, events named after  *)
(* KRaft.tla's actions, kref/trace/kraft.py; converted by                  *)
(* trace_check/kraft.py into the constant TraceLog) a behaviour of the     *)
(* real spec?  The spec is EXTENDed, not copied: every step below is one   *)
(* of its actions, constrained by one logged event.                        *)
(*                                                                         *)
(* A cursor `tl` walks TraceLog.  Each step takes the event under the      *)
(* cursor and performs the action of the same name on the voter that      *)
(* logged it (with the peer the event names: the candidate of a vote, the  *)
(* leader a follower fetched from, the node whose higher epoch it         *)
(* learnt), and then requires the voter's post-state to be the one logged: *)
(* leader_epoch, voted_for, leader_id, state, log end offset and the epoch *)
(* of its last entry (AsLogged).  A leader's AdvanceHighWatermark must     *)
(* also reach the logged high watermark from the logged end offsets of the *)
(* other voters.                                                           *)
(*                                                                         *)
(* The controller's membership writes (RegisterBroker, FenceBroker,        *)
(* UnfenceBroker), heartbeats and ControlledShutdown are the actions of    *)
(* those names; the session expiry before a FenceBroker and the broker's  *)
(* metadata fetch before an UnfenceBroker are not logged, and trace_check *)
(* puts them in (ExpireBrokerSession, BrokerFetchMetadata, each possibly a *)
(* no-op).  A RegisterBroker lands at the offset it logged (its broker     *)
(* epoch).  The controller's other records (topics, partitions, configs)   *)
(* are logged by nobody: trace_check puts one AppendMetadata step per      *)
(* record where the leader's logged log end offset grew by them, right     *)
(* after that leader's previous step.                                      *)
(*                                                                         *)
(* Votes are messages (KRaft.tla's VoteRequest and VoteResponse): a        *)
(* RequestVote or PreVote event sends the request, a voter's GrantVote or  *)
(* GrantPreVote event handles it whenever it logged it (the candidate may  *)
(* have moved on since) and sends its grant; the candidate's receipt       *)
(* (HandleVoteResponse) is logged by nobody and is a silent step, which    *)
(* TLC may take wherever the candidate still stands in that epoch.         *)
(*                                                                         *)
(* KIP-996 pre-votes are PreVote (a prospective's round) and GrantPreVote  *)
(* (a voter's grant, its own state unchanged); a RequestVote then needs   *)
(* the grants of a majority.  PreVoteEnabled is TRUE for a trace whose     *)
(* RequestVote events say the core pre-voted (pre_vote), FALSE for older   *)
(* traces and cores configured without it.                                 *)
(*                                                                         *)
(* A follower's FetchFromLeader with records is the receipt of a message  *)
(* too (KRaft.tla's FetchResponse, FetchResponsesInFlight on): trace_check *)
(* puts the leader's unlogged SendFetchResponse where the leader still     *)
(* led, so a follower may take an answer after its leader resigned.        *)
(*                                                                         *)
(* Snapshots are the actions of their names (CreateSnapshot,             *)
(* AdvanceLogStart, InstallSnapshot): a follower's install is taken from  *)
(* the leader it names, whose log must start past the follower's fetch    *)
(* position (KRaft.tla's NeedsSnapshot).                                   *)
(*                                                                         *)
(* What a trace does not show stays free and TLC searches for it: a        *)
(* follower's Fetch whose response carried no records is logged by nobody  *)
(* (the leader only records the fetch offset), so it is a silent step      *)
(* (FetchFromLeader leaving the follower's log as it is) that TLC may take *)
(* anywhere; followers' high watermarks are not compared (kref, like       *)
(* Kafka, answers with the high watermark this very fetch advanced, the    *)
(* spec with the one before it).                                           *)
(*                                                                         *)
(* TLC explores the behaviours that follow the trace; the state            *)
(* constraint TraceProgress prints "kref-trace-accepted" as soon as one   *)
(* has taken every event, and how far the deepest got, which trace_check   *)
(* reports as the first event no action can take.  The protocol is         *)
(* spec/TraceReplication.tla's: TraceLogs holds a batch of traces, and     *)
(* TraceInit chooses the one a behaviour follows (ti).                     *)
(***************************************************************************)
EXTENDS KRaft, Integers, TLC  \* Integers: kref logs Nil as -1

CONSTANT TraceLogs  \* << << [type |-> "GrantVote", replica |-> 1, candidate |-> 2, ...], ... >>, ... >>
CONSTANT TraceShowState  \* indices of the traces whose last spec state is printed when accepted

VARIABLE ti         \* which trace of the batch this behaviour follows (chosen in TraceInit)
VARIABLE tl         \* the cursor: index of the next event of that trace to take

trace_vars == <<vars, ti, tl>>

\* Zero-arity: TLC evaluates it once (through the CONSTANT, the .cfg's
\* substituted literal would be built again at every use).
Traces == TraceLogs
TraceLog == Traces[ti]
Ev == TraceLog[tl]

SetOf(s) == {s[i] : i \in DOMAIN s}

TraceInit ==
    /\ Init
    /\ ti \in DOMAIN Traces
    /\ tl = 1
    /\ TLCSet(1 + ti, 1)  \* see TraceProgress
    /\ TLCSet(1, 0)

-----------------------------------------------------------------------------
(* The post-state of voter v, as its event logged it. *)

AsLogged(v) ==
    /\ leader_epoch'[v] = Ev.leader_epoch
    /\ voted_for'[v] = Ev.voted_for
    /\ leader_id'[v] = Ev.leader_id
    /\ state'[v] = Ev.state
    /\ Len(log'[v]) = Ev.log_end_offset
    \* Primed by hand: LastEpoch(v)' would prime the cursor inside v too.
    /\ (IF log'[v] = << >> THEN 0 ELSE log'[v][Len(log'[v])].epoch) = Ev.last_epoch

-----------------------------------------------------------------------------
(* One matcher per event type: the spec action, constrained by the event. *)

TRequestVote == RequestVote(Ev.replica) /\ AsLogged(Ev.replica)

TGrantVote == GrantVote(Ev.replica, Ev.candidate) /\ AsLogged(Ev.replica)

\* KIP-996: the prospective's round (its post-state is its pre-state but for
\* state and the votes it counts), and a voter's pre-vote grant (its own
\* state unchanged, as logged; the prospective counts it).
TPreVote == PreVote(Ev.replica) /\ AsLogged(Ev.replica)

\* The grant is a VoteResponse in flight: the prospective counts it when it
\* receives it (a silent step, below), or never if its round ended first.
\* A request whose prospective has since left the epoch is no longer in
\* `messages` (KRaft.tla's StaleAfter: its grant would be ignored); its
\* late grant is then a step of the voter alone that changes nothing.
TGrantPreVote ==
    LET v == Ev.replica
        c == Ev.candidate IN
    \/ GrantPreVote(v, c) /\ AsLogged(v)
    \/ /\ Live(v)
       /\ leader_epoch[c] > leader_epoch[v]
       /\ state[v] \notin {Leader, Follower}
       /\ UNCHANGED vars
       /\ AsLogged(v)

TBecomeUnattached == BecomeUnattached(Ev.replica, Ev.source) /\ AsLogged(Ev.replica)

\* The candidate counted at least the votes it logged (their VoteResponses
\* were received in silent steps before; one received after it counted a
\* majority is in the spec's votes_granted too).
TBecomeActiveController ==
    LET c == Ev.replica IN
    /\ SetOf(Ev.votes_granted) \subseteq votes_granted[c]
    /\ BecomeActiveController(c)
    /\ AsLogged(c)

TBeginQuorumEpoch == BeginQuorumEpoch(Ev.leader_id, Ev.replica) /\ AsLogged(Ev.replica)

\* A fetch answer with records is a message (KRaft's FetchResponsesInFlight,
\* on here: TraceRun.cfg has `FetchResponsesInFlight <- TFetchResponsesInFlight`).
\* The leader logs nothing when it answers: trace_check puts in a
\* SendFetchResponse step of that leader for every logged take with
\* records, at the latest point before the take where the leader still led
\* the epoch and the follower's log ended at the fetch offset; the take
\* (the follower's FetchFromLeader event) is HandleFetchResponse of it.
\* One with no records stays the atomic FetchFromLeader.
TFetchResponsesInFlight == TRUE
TSendFetchResponse ==
    LET l == Ev.replica
        f == Ev.follower IN
    /\ leader_epoch[l] = Ev.leader_epoch
    /\ LogEndOffset(f) = Ev.first_offset
    /\ Ev.log_end_offset <= LogEndOffset(l)
    /\ SendFetchResponse(l, f)
    /\ FetchResponseMsg(l, f, Ev.log_end_offset) \in messages'

TFetchFromLeader ==
    LET f == Ev.replica IN
    /\ LogEndOffset(f) = Ev.first_offset
    /\ IF FetchResponsesInFlight /\ Ev.log_end_offset > Ev.first_offset
       THEN HandleFetchResponse(f, Ev.leader_id)
       ELSE FetchFromLeader(f, Ev.leader_id)
    /\ AsLogged(f)

TTruncateToEpochEndOffset ==
    TruncateToEpochEndOffset(Ev.replica, Ev.leader_id) /\ AsLogged(Ev.replica)

\* `fetched`: << <<voter, fetch offset>>, ... >> for every other voter, 0
\* for one that has not fetched in this epoch (trace_check fills it in from
\* the event's end_offsets).
TAdvanceHighWatermark ==
    LET l == Ev.replica IN
    /\ \A i \in DOMAIN Ev.fetched : end_offsets[l][Ev.fetched[i][1]] = Ev.fetched[i][2]
    /\ AdvanceHighWatermark(l)
    /\ high_watermark'[l] = Ev.high_watermark
    /\ AsLogged(l)

TResign == Resign(Ev.replica) /\ AsLogged(Ev.replica)

\* Broker membership: the controller (replica) that logged the write, in
\* the quorum epoch it logged, performs the spec's write for the broker.
AtEpoch == leader_epoch[Ev.replica] = Ev.leader_epoch
TRegisterBroker ==
    /\ AtEpoch
    /\ LogEndOffset(Ev.replica) = Ev.broker_epoch  \* kref's broker epoch: the record's offset
    /\ RegisterBroker(Ev.replica, Ev.broker)
TFenceBroker == AtEpoch /\ FenceBroker(Ev.replica, Ev.broker)
TUnfenceBroker == AtEpoch /\ UnfenceBroker(Ev.replica, Ev.broker)
\* kref logs every heartbeat; the spec's BrokerHeartbeat is the one that
\* revives an expired session, any other changes nothing (a stuttering step).
TBrokerHeartbeat ==
    LET l == Ev.replica
        b == Ev.broker IN
    /\ AtEpoch
    /\ \/ BrokerHeartbeat(b, l)
       \/ /\ Live(l) /\ state[l] = Leader /\ b \in broker_sessions[l]
          /\ UNCHANGED vars
\* The broker asked to shut down: its session ends on its own request.
TControlledShutdown == AtEpoch /\ ControlledShutdown(Ev.replica, Ev.broker)
\* Inferred by trace_check: one record the leader wrote that no event names.
TAppendMetadata == AppendMetadata(Ev.replica)
\* Inferred by trace_check before a FenceBroker: the session ran out (if it
\* had not already, e.g. when the leader resumed from a pause).
TExpireBrokerSession ==
    \/ ExpireBrokerSession(Ev.replica, Ev.broker)
    \/ Ev.broker \notin broker_sessions[Ev.replica] /\ UNCHANGED vars
\* Inferred by trace_check before an UnfenceBroker: the broker read the
\* metadata log up to the controller's high watermark (or had already).
TBrokerFetchMetadata ==
    \/ BrokerFetchMetadata(Ev.broker, Ev.replica)
    \/ UNCHANGED vars

\* Snapshots (KIP-630): the node's new latest snapshot, its log start moved
\* to it, a follower's install of its leader's snapshot, each landing where
\* it was logged (the snapshot's end offset, and its epoch: that of the
\* entry before its end).
TCreateSnapshot ==
    LET v == Ev.replica IN
    /\ CreateSnapshot(v)
    /\ snapshot_end_offset'[v] = Ev.snapshot_end_offset
    /\ log[v][Ev.snapshot_end_offset].epoch = Ev.snapshot_epoch
    /\ AsLogged(v)
TAdvanceLogStart ==
    AdvanceLogStart(Ev.replica) /\ log_start_offset'[Ev.replica] = Ev.log_start_offset /\ AsLogged(Ev.replica)
TInstallSnapshot ==
    LET f == Ev.replica IN
    /\ InstallSnapshot(f, Ev.leader_id)
    /\ snapshot_end_offset'[f] = Ev.snapshot_end_offset
    /\ AsLogged(f)  \* its log end offset and last epoch are the snapshot's id

\* Inferred by trace_check where a voter's run ends and its next begins (a
\* kill -9 logs nothing): what the restarted node believes is RestartState,
\* and its next event is compared with it.
TCrash == Crash(Ev.replica)
TRestart == Restart(Ev.replica)

TraceStep ==
    /\ tl <= Len(TraceLog)
    /\ CASE Ev.type = "RequestVote"              -> TRequestVote
         [] Ev.type = "PreVote"                  -> TPreVote
         [] Ev.type = "GrantPreVote"             -> TGrantPreVote
         [] Ev.type = "GrantVote"                -> TGrantVote
         [] Ev.type = "BecomeUnattached"         -> TBecomeUnattached
         [] Ev.type = "BecomeActiveController"   -> TBecomeActiveController
         [] Ev.type = "BeginQuorumEpoch"         -> TBeginQuorumEpoch
         [] Ev.type = "FetchFromLeader"          -> TFetchFromLeader
         [] Ev.type = "SendFetchResponse"        -> TSendFetchResponse
         [] Ev.type = "TruncateToEpochEndOffset" -> TTruncateToEpochEndOffset
         [] Ev.type = "AdvanceHighWatermark"     -> TAdvanceHighWatermark
         [] Ev.type = "Resign"                   -> TResign
         [] Ev.type = "CreateSnapshot"           -> TCreateSnapshot
         [] Ev.type = "AdvanceLogStart"          -> TAdvanceLogStart
         [] Ev.type = "InstallSnapshot"          -> TInstallSnapshot
         [] Ev.type = "RegisterBroker"           -> TRegisterBroker
         [] Ev.type = "FenceBroker"              -> TFenceBroker
         [] Ev.type = "UnfenceBroker"            -> TUnfenceBroker
         [] Ev.type = "BrokerHeartbeat"          -> TBrokerHeartbeat
         [] Ev.type = "ControlledShutdown"       -> TControlledShutdown
         [] Ev.type = "AppendMetadata"           -> TAppendMetadata
         [] Ev.type = "ExpireBrokerSession"      -> TExpireBrokerSession
         [] Ev.type = "BrokerFetchMetadata"      -> TBrokerFetchMetadata
         [] Ev.type = "Crash"                    -> TCrash
         [] Ev.type = "Restart"                  -> TRestart
         [] OTHER                                -> FALSE
    /\ ti' = ti
    /\ tl' = tl + 1

\* A Fetch answered with no records, and a candidate's (or prospective's)
\* receipt of a granted VoteResponse: nobody logs them (see above).
SilentStep ==
    /\ \/ \E f, l \in Voters : FetchFromLeader(f, l) /\ log'[f] = log[f]
       \/ \E c, v \in Voters : HandleVoteResponse(c, v)
    /\ UNCHANGED <<ti, tl>>

TraceNext == TraceStep \/ SilentStep

TraceSpec == TraceInit /\ [][TraceNext]_trace_vars

-----------------------------------------------------------------------------
(* What TLC checks. *)

\* The spec state trace_check reports, logs shown by end offset and last epoch.
StateView ==
    [state |-> state,
     leader_epoch |-> leader_epoch,
     voted_for |-> voted_for,
     leader_id |-> leader_id,
     votes_granted |-> votes_granted,
     log_end_offset |-> [v \in Voters |-> LogEndOffset(v)],
     last_epoch |-> [v \in Voters |-> LastEpoch(v)],
     high_watermark |-> high_watermark,
     log_start_offset |-> log_start_offset,
     snapshot_end_offset |-> snapshot_end_offset,
     end_offsets |-> end_offsets,
     broker_sessions |-> broker_sessions,
     broker_metadata_offset |-> broker_metadata_offset,
     messages |-> messages,
     registered |-> [v \in Voters |-> {b \in Brokers : IsRegistered(v, b)}],
     fenced |-> [v \in Voters |-> {b \in Brokers : IsFenced(v, b)}],
     up |-> up]

\* As TraceReplication.TraceProgress: TLC register 1 counts the traces
\* accepted, register 1 + i the deepest cursor trace i reached (printed at
\* every new depth); a behaviour that took every event of its trace accepts
\* it, its later states are pruned, and TLC stops once every trace is.
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
