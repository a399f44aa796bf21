"""Facts of the seven example tasks (one per task type of the DCI paper).

Read by ``build_models.py``, which writes the task YAML files and the scripted model
files from them. Option ids ``o4``/``o5`` are the options participants add in stage 2
of tasks that come with three options; tasks without options get ``o1``..``o4``.
"""

from __future__ import annotations

TASKS: list[dict] = [
    {
        "id": "hidden_profile",
        "type": "hidden_profile",
        "question": "Which vendor should we select for the hospital patient-scheduling system?",
        "context": (
            "Three vendors remain after the RFP. Facts are spread across the committee. Procurement notes: "
            "Vendor A is the cheapest (1.1M over five years) and has the slickest demo; Vendor B costs 1.4M; "
            "Vendor C costs 1.25M. IT security notes: Vendor A stores backups in a region outside our data "
            "residency rules and has no SOC 2 Type II report yet; Vendor B and C both hold current reports. "
            "Clinical operations notes: nurses in the pilot found Vendor C's rescheduling flow took three clicks "
            "against seven for Vendor B; Vendor A was not piloted. Finance notes: Vendor C offers a 12-month "
            "exit clause without penalty; Vendor B requires a five-year commitment. Integration notes: Vendor B "
            "already has a certified HL7 interface to our EHR; Vendor C's interface is scheduled for Q3 and "
            "would need a 4-month interim batch feed. Each note was seen by one member only."
        ),
        "options": [
            ["A", "Select Vendor A (lowest price, strongest demo)."],
            ["B", "Select Vendor B (certified EHR interface, five-year commitment)."],
            ["C", "Select Vendor C (best clinical usability, exit clause, interface due Q3)."],
        ],
        "criteria": [
            "patient safety",
            "data residency compliance",
            "clinical usability",
            "total cost",
            "reversibility",
        ],
        "top": "o5",
        "runner": "o2",
        "third": "o1",
        "path": "r1",
        "short": {
            "o1": "Vendor A",
            "o2": "Vendor B",
            "o3": "Vendor C",
            "o4": "Vendor C with a staged go-live",
            "o5": "Vendor C with staged go-live and contractual Q3 interface milestone",
        },
        "new": {
            "o4": "Select Vendor C but stage the go-live: outpatient clinics first on the interim batch feed, inpatient units only after the certified HL7 interface ships.",
            "o5": "Select Vendor C with a staged go-live and make the Q3 HL7 interface a contractual milestone, with the 12-month exit clause as the fallback if it slips.",
        },
        "stakes": "patient access to care, regulatory exposure on data residency, and a five-year operating cost",
        "constraints": "data residency rules, an EHR that every scheduling change must reach, and nurses already stretched thin",
        "success": "keep patient data compliant, cut clinical friction, and stay reversible if integration slips",
        "assumption": "the interim batch feed is safe enough for four months of inpatient scheduling",
        "consequence": "double-booked beds or missed appointments when the nightly batch lags a same-day change",
        "doubt": "the integration notes say the feed runs nightly, while inpatient changes happen hourly",
        "mitigation": "limiting the interim period to outpatient clinics, where same-day changes are rare",
        "criterion": "patient safety",
        "evidence": "IT security confirms Vendor A's backups sit outside our residency region and it has no SOC 2 Type II report; that alone disqualifies A under our policy.",
        "ask": "What happens to the committee's preference for B once we weigh that its five-year lock-in removes any leverage if the vendor underperforms?",
        "runner_flaw": "it locks us in for five years while nurses measured more than twice the clicks for the most frequent task",
        "third_flaw": "it fails our data residency rule and has no audit report, whatever its price",
        "risks": [
            "Q3 interface slips and the batch feed becomes permanent",
            "outpatient rollout surfaces usability gaps missed in the pilot",
            "Vendor C's smaller support team cannot meet hospital SLAs",
            "staff change fatigue during the staged rollout",
        ],
        "actions": [
            "Negotiate the Q3 HL7 milestone with a service credit into Vendor C's contract",
            "Run outpatient go-live with daily reconciliation against the EHR",
            "Schedule an inpatient readiness review once the interface is certified",
        ],
        "reopen": [
            "The HL7 interface misses its Q3 milestone by more than 30 days",
            "Reconciliation finds more than one scheduling mismatch per 1,000 changes in outpatient go-live",
        ],
        "late": None,
        "baseline_choice": "C",
        "votes": ["C", "C", "B", "C", "B"],
    },
    {
        "id": "late_evidence",
        "type": "late_evidence",
        "question": "Should we ship the new recommendation model to all users this week?",
        "context": (
            "The new ranking model raised click-through by 4.1% in a two-week A/B test on 10% of traffic. "
            "Latency p99 rose from 180 ms to 240 ms, within the 250 ms budget. The marketing launch is "
            "planned for Friday. Late evidence (arrived this morning): the data team found that the test "
            "cohort over-sampled returning users; on new users the click-through gain is 0.6% and not "
            "significant, and session length for new users fell by 3%."
        ),
        "options": [
            ["ship", "Ship to 100% of users on Friday with the marketing launch."],
            ["extend", "Extend the A/B test two weeks with a corrected cohort before deciding."],
            ["segment", "Ship to returning users only; keep the old model for new users."],
        ],
        "criteria": ["user impact", "evidence quality", "launch commitments", "reversibility"],
        "top": "o3",
        "runner": "o1",
        "third": "o2",
        "path": "r2",
        "short": {
            "o1": "full ship Friday",
            "o2": "extended test",
            "o3": "returning-users ship",
            "o4": "ship behind a kill switch",
            "o5": "returning-users ship plus corrected new-user test",
        },
        "new": {
            "o4": "Ship to everyone on Friday behind a kill switch that reverts new users automatically if their session length drops more than 2%.",
            "o5": "Ship to returning users on Friday and run a corrected two-week test on new users before extending the model to them.",
        },
        "stakes": "first impressions of new users, a public launch date, and trust in our experiment results",
        "constraints": "the Friday marketing date, the 250 ms latency budget, and a test cohort we now know was skewed",
        "success": "capture the real gain for returning users without harming the new users we most need to keep",
        "assumption": "the 4.1% gain holds for the whole population",
        "consequence": "a launch that quietly hurts new-user retention while dashboards show a win",
        "doubt": "the corrected analysis shows the gain is concentrated in returning users",
        "mitigation": "segmenting the rollout so new users keep the old model until a clean test says otherwise",
        "criterion": "user impact",
        "evidence": "The corrected cohort analysis: new users +0.6% click-through (not significant), session length -3%; returning users +5.2%.",
        "ask": "Can marketing launch on Friday with a returning-users rollout, or does the campaign specifically target new sign-ups?",
        "runner_flaw": "it ships a model whose benefit to new users is unproven and whose session-length effect is negative",
        "third_flaw": "it forfeits a well-measured gain for returning users for two more weeks",
        "risks": [
            "segmentation logic misclassifies users at the boundary",
            "marketing messaging over-promises to new users",
            "returning-user gain decays after novelty wears off",
            "two models double the on-call burden",
        ],
        "actions": [
            "Ship to returning users on Friday behind the existing flag",
            "Start a corrected two-week test on new users with session length as a guardrail",
            "Align the marketing copy with the returning-user rollout",
        ],
        "reopen": [
            "The corrected new-user test shows a significant gain without a session-length loss",
            "Returning-user click-through gain falls below 2% in the first two weeks",
        ],
        "late": "New this round: the corrected cohort analysis arrived. New users gain only 0.6% (not significant) and lose 3% session length; returning users gain 5.2%.",
        "baseline_choice": "extend",
        "votes": ["extend", "segment", "extend", "ship", "segment"],
    },
    {
        "id": "risk",
        "type": "risk",
        "question": "How should we handle the expiring TLS certificates on our payment gateway fleet?",
        "context": (
            "Forty payment gateway nodes use certificates that expire in nine days. Renewal is manual today "
            "and took four engineers two days last year, with one outage when a node was missed. A managed "
            "certificate service could automate renewal but has never been used in the payment zone, which "
            "is PCI scoped. A change freeze for the quarterly release starts in five days."
        ),
        "options": [
            ["manual", "Renew manually now with a checklist, before the freeze."],
            ["managed", "Adopt the managed certificate service for the payment zone now."],
            ["extend", "Request a freeze exception and renew during the freeze."],
        ],
        "criteria": ["outage risk", "PCI compliance", "time to safety", "long-term toil"],
        "top": "o4",
        "runner": "o2",
        "third": "o3",
        "path": "r1",
        "short": {
            "o1": "manual renewal",
            "o2": "managed service now",
            "o3": "freeze exception",
            "o4": "manual renewal now, managed service piloted after the freeze",
            "o5": "manual renewal with scripted verification",
        },
        "new": {
            "o4": "Renew manually now with a verified inventory and checklist, then pilot the managed service on two non-critical payment nodes after the freeze.",
            "o5": "Renew manually now and add a scripted post-renewal check that queries every node's served certificate and expiry date.",
        },
        "stakes": "payment availability, PCI compliance, and the on-call team's capacity during the freeze",
        "constraints": "nine days to expiry, a freeze in five, and a PCI-scoped zone where new tooling needs review",
        "success": "renew every node before expiry with no outage, without introducing unreviewed tooling into PCI scope",
        "assumption": "the node inventory used for manual renewal is complete",
        "consequence": "a missed node expiring mid-freeze and failing payments, exactly last year's outage",
        "doubt": "last year's outage came from a node missing in the inventory",
        "mitigation": "reconciling the inventory against the load balancer's live pool before starting",
        "criterion": "outage risk",
        "evidence": "Last year's post-mortem: 39 of 40 nodes renewed; the missed node was added after the inventory export; outage lasted 47 minutes.",
        "ask": "Has the managed service been through PCI review anywhere in the company, and how long did that review take?",
        "runner_flaw": "it puts unreviewed tooling into PCI scope on a nine-day clock",
        "third_flaw": "it moves risky work into the freeze, when rollback capacity is lowest",
        "risks": [
            "inventory misses a node again",
            "renewal steps differ across node images",
            "managed-service PCI review takes longer than the pilot window",
            "freeze starts before verification is complete",
        ],
        "actions": [
            "Reconcile the inventory with the live load balancer pool today",
            "Renew all forty nodes with the checklist by day three",
            "Verify every node's served certificate with a script before the freeze",
            "Open the PCI review for the managed service",
        ],
        "reopen": [
            "Any node serves a certificate expiring within 30 days after the renewal window",
            "The PCI review of the managed service finishes early enough to adopt it before the next expiry",
        ],
        "late": None,
        "baseline_choice": "manual",
        "votes": ["manual", "manual", "managed", "manual", "extend"],
    },
    {
        "id": "disagreement",
        "type": "disagreement",
        "question": "Should the team move from two-week sprints to a continuous Kanban flow?",
        "context": (
            "The platform team (nine engineers) is split. Half say sprint planning wastes a day every two "
            "weeks and interrupts on-call work anyway; the other half say sprints are the only thing that "
            "protects roadmap work from the ticket queue. Last quarter 38% of sprint commitments slipped; "
            "ticket response times met their target 91% of the time. The product manager needs a predictable "
            "date for the quota-service migration."
        ),
        "options": [
            ["kanban", "Switch fully to Kanban with WIP limits."],
            ["sprints", "Keep two-week sprints, tighten commitments."],
            ["split", "Split the team: an interrupt rotation on Kanban, roadmap work in sprints."],
        ],
        "criteria": [
            "predictability of roadmap dates",
            "responsiveness to tickets",
            "team morale",
            "process overhead",
        ],
        "top": "o3",
        "runner": "o1",
        "third": "o2",
        "path": "fallback",
        "short": {
            "o1": "full Kanban",
            "o2": "keep sprints",
            "o3": "split team",
            "o4": "Kanban with a quarterly milestone plan",
            "o5": "split team with a rotating interrupt pair",
        },
        "new": {
            "o4": "Move to Kanban with WIP limits and add a quarterly milestone plan for the migration with monthly forecast reviews.",
            "o5": "Split the team with a rotating two-person interrupt pair on Kanban and the rest on roadmap sprints, rotating every sprint.",
        },
        "stakes": "the migration date, ticket response times, and a team that is openly divided",
        "constraints": "nine engineers, an on-call duty that cannot pause, and a migration the business has promised",
        "success": "protect roadmap work without letting ticket response slip, and leave both camps able to live with the choice",
        "assumption": "interrupts can be contained by the people assigned to them",
        "consequence": "roadmap engineers still pulled into escalations, so neither mode works",
        "doubt": "38% of commitments slipped, largely from escalations that needed specialists",
        "mitigation": "a clear escalation path with a specialist on call per area",
        "criterion": "predictability of roadmap dates",
        "evidence": "Ticket data: 62% of slipped commitments trace to escalations that reached roadmap engineers directly.",
        "ask": "How would full Kanban give the product manager a date for the migration that she can commit to?",
        "runner_flaw": "it removes the one mechanism the roadmap camp trusts without replacing its forecasting",
        "third_flaw": "it keeps the process that slipped 38% of commitments and changes nothing structural",
        "risks": [
            "interrupt duty becomes a second-class role",
            "the split hardens the camps",
            "forecasts still slip on escalations",
            "rotation overhead eats the gain",
        ],
        "actions": [
            "Pilot the split for two sprints with a rotating interrupt pair",
            "Track commitment slip and ticket response weekly",
            "Hold a retrospective with both camps before making it permanent",
        ],
        "reopen": [
            "Commitment slip stays above 25% after two sprints of the pilot",
            "Ticket response drops below the 90% target",
        ],
        "late": None,
        "baseline_choice": "split",
        "votes": ["split", "kanban", "sprints", "split", "kanban"],
    },
    {
        "id": "policy",
        "type": "policy",
        "question": "What remote-work policy should the company adopt for engineering from next quarter?",
        "context": (
            "Engineering (240 people) has been fully remote for three years. Leadership wants more in-person "
            "collaboration after two cross-team projects failed on coordination. A survey shows 61% would "
            "accept one or two office days a week, 18% would consider leaving over a mandate, and 27% live "
            "more than 90 minutes from an office. Office space fits 40% of engineering at once."
        ),
        "options": [
            ["mandate", "Three fixed office days a week for everyone within commuting range."],
            ["remote", "Stay fully remote; fund quarterly in-person team weeks."],
            [
                "anchor",
                "Team-chosen anchor days: one or two per week, remote staff join quarterly onsites.",
            ],
        ],
        "criteria": [
            "collaboration quality",
            "retention",
            "fairness to remote staff",
            "office capacity",
        ],
        "top": "o3",
        "runner": "o2",
        "third": "o1",
        "path": "r1",
        "short": {
            "o1": "three-day mandate",
            "o2": "fully remote with team weeks",
            "o3": "team anchor days",
            "o4": "project-phase onsite weeks",
            "o5": "anchor days with a review after two quarters",
        },
        "new": {
            "o4": "Keep remote by default and bring cross-team projects together onsite for kickoff and integration weeks.",
            "o5": "Adopt team-chosen anchor days with quarterly onsites and review attrition and delivery after two quarters.",
        },
        "stakes": "retention of senior engineers, delivery of cross-team projects, and fairness across locations",
        "constraints": "office space for 40% of staff, 27% living far from an office, and a survey signalling attrition risk",
        "success": "improve coordination on cross-team work without losing the people a mandate would push out",
        "assumption": "coordination failures were caused by lack of in-person time rather than unclear ownership",
        "consequence": "paying the attrition cost of a policy change that does not fix the real problem",
        "doubt": "both failed projects also lacked a single accountable lead",
        "mitigation": "pairing the policy with a named owner for each cross-team project",
        "criterion": "retention",
        "evidence": "Survey: 61% accept one or two office days; 18% would consider leaving over a mandate; office fits 40% at once.",
        "ask": "Do the people who live more than 90 minutes away get the same career visibility under anchor days?",
        "runner_flaw": "it does not change the day-to-day coordination that failed on the two projects",
        "third_flaw": "it exceeds office capacity and triggers the 18% attrition risk",
        "risks": [
            "anchor days drift into an informal mandate",
            "remote staff lose visibility",
            "teams pick clashing days and cross-team contact stays low",
            "office crowding on popular days",
        ],
        "actions": [
            "Let each team choose anchor days within capacity limits",
            "Name an accountable lead for every cross-team project",
            "Fund quarterly onsites for remote staff",
            "Review attrition and delivery after two quarters",
        ],
        "reopen": [
            "Engineering attrition rises more than three points over baseline within two quarters",
            "Cross-team delivery shows no improvement after two quarters",
        ],
        "late": None,
        "baseline_choice": "anchor",
        "votes": ["anchor", "anchor", "remote", "anchor", "mandate"],
    },
    {
        "id": "architecture",
        "type": "architecture",
        "question": "How should we split the monolith's billing module as order volume triples next year?",
        "context": (
            "Billing lives in the monolith and shares its PostgreSQL database. Invoice generation takes 40 "
            "minutes at month end and locks order tables; volume is forecast to triple. Two senior engineers "
            "know the billing code. Finance requires exact reconciliation between orders and invoices."
        ),
        "options": [],
        "criteria": [
            "correctness of reconciliation",
            "scalability",
            "delivery risk",
            "team capacity",
        ],
        "top": "o2",
        "runner": "o1",
        "third": "o3",
        "path": "r1",
        "short": {
            "o1": "full billing microservice",
            "o2": "strangler extraction starting with invoice generation",
            "o3": "read replica and batch tuning",
            "o4": "event-sourced billing ledger",
        },
        "new": {
            "o1": "Extract billing into its own service with its own database, migrating all billing features in one project.",
            "o2": "Strangle billing incrementally: move month-end invoice generation first into a worker reading a replica, then migrate billing features one by one.",
            "o3": "Keep billing in the monolith; move invoice generation reads to a read replica and tune the batch.",
            "o4": "Rebuild billing as an event-sourced ledger fed by order events, replacing table reads entirely.",
        },
        "stakes": "month-end availability of ordering, exact financial reconciliation, and two engineers' next year",
        "constraints": "a shared database, month-end locks, two people who know the code, and zero tolerance for reconciliation errors",
        "success": "remove month-end locking before volume triples without risking a reconciliation error",
        "assumption": "replica lag stays small enough for exact month-end reconciliation",
        "consequence": "invoices that disagree with orders and a finance close that has to be redone",
        "doubt": "replica lag during month-end write peaks is not measured today",
        "mitigation": "cutting invoices from a consistent snapshot at a fixed cut-off time and reconciling counts before sending",
        "criterion": "correctness of reconciliation",
        "evidence": "Month-end profile: 40 minutes of invoice generation, 70% spent in reads that lock the orders table.",
        "ask": "Who besides the two billing engineers can own the extracted worker on call?",
        "runner_flaw": "it bets the year on a big-bang migration owned by two people",
        "third_flaw": "it postpones the structural problem and stops working somewhere between double and triple volume",
        "risks": [
            "replica lag breaks reconciliation",
            "knowledge stays with two engineers",
            "strangler seams leak and both paths diverge",
            "finance close disrupted during cut-over",
        ],
        "actions": [
            "Measure replica lag during the next month-end",
            "Build the invoice worker against a snapshot with count reconciliation",
            "Pair a third engineer on billing from day one",
        ],
        "reopen": [
            "Replica or snapshot lag makes reconciliation inexact in a dry run",
            "Volume forecasts rise enough that incremental extraction cannot finish in time",
        ],
        "late": None,
        "baseline_choice": "strangler",
        "votes": ["strangler", "strangler", "microservice", "strangler", "replica"],
    },
    {
        "id": "routine",
        "type": "routine",
        "question": "Which day should the weekly team sync move to now that Monday clashes with the release review?",
        "context": (
            "The weekly 30-minute sync of a six-person team clashes with the new Monday release review. "
            "Two people work Tuesday to Saturday. Fridays have the lowest meeting load."
        ),
        "options": [],
        "criteria": ["attendance", "minimal disruption"],
        "top": "o2",
        "runner": "o1",
        "third": "o3",
        "path": "r1",
        "short": {
            "o1": "Tuesday morning",
            "o2": "Wednesday late morning",
            "o3": "Friday morning",
            "o4": "asynchronous weekly update",
        },
        "new": {
            "o1": "Move the sync to Tuesday at 10:00.",
            "o2": "Move the sync to Wednesday at 11:00, when all six people are working and the release review is done.",
            "o3": "Move the sync to Friday at 10:00, the lightest meeting day.",
            "o4": "Replace the sync with a written weekly update and a monthly call.",
        },
        "stakes": "a half hour a week and whether everyone can attend",
        "constraints": "two people work Tuesday to Saturday and Monday is taken",
        "success": "find a slot everyone can attend that creates no new clash",
        "assumption": "Wednesday has no recurring conflicts for the two Tuesday-to-Saturday colleagues",
        "consequence": "the same clash problem moved to another day",
        "doubt": "nobody has checked the shared calendars yet",
        "mitigation": "checking the shared calendars before announcing",
        "criterion": "attendance",
        "evidence": "The two colleagues on a Tuesday-to-Saturday schedule have no Wednesday late-morning meetings.",
        "ask": "Do the colleagues who start on Tuesday need Tuesday morning for catch-up?",
        "runner_flaw": "it lands on the first working morning of two colleagues, who use it to catch up",
        "third_flaw": "Friday syncs are the first meeting dropped before holidays",
        "risks": ["a recurring clash appears later", "attendance drops on Wednesdays"],
        "actions": ["Check the shared calendars", "Announce the Wednesday 11:00 slot"],
        "reopen": ["Attendance falls below five of six for two weeks running"],
        "late": None,
        "baseline_choice": "wednesday",
        "votes": ["wednesday", "wednesday", "tuesday", "wednesday", "friday"],
    },
]
