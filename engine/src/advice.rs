//! What each launch rejection means and what an admin can do about it: the words of the
//! outage report's failed-launch table, next to the reason codes they explain.
//!
//! Invariant: one entry per `Reason`, so a new reason does not compile without its words.

use crate::output::Reason;

impl Reason {
    /// What a rejection for this reason means and what an admin can do about it, in one
    /// line each (the failed-launch table of the outage report).
    // One arm per reason: a table, longer than ~80 lines by nature.
    pub fn advice(self) -> (&'static str, &'static str) {
        match self {
            Reason::CloudUnreachable => (
                "the cloud was unreachable and LHC mode had not started yet (detection gap)",
                "expected for the detection delay after an outage starts (second_check_s: 60 s; \
                 90 s on-premises); users retry once LHC brokers",
            ),
            Reason::NoLhcDatabase => (
                "the connector had no usable LHC database: no import yet, or it was stopped \
                 before the outage and started during it (R-STATE-10)",
                "keep config sync healthy (no 505); during an outage, do not start a \
                 connector that was off before it",
            ),
            Reason::LhcDisabled => (
                "Local Host Cache is disabled for the site",
                "Set-BrokerSite -LocalHostCacheEnabled $true",
            ),
            Reason::HaServiceNotRunning => (
                "the connector's High Availability Service was stopped",
                "start the Citrix High Availability Service on the connector",
            ),
            Reason::NoStorefrontTraffic => (
                "no StoreFront had reached this connector, so it does not take part in LHC",
                "list this connector in StoreFront's Delivery Controllers for the store",
            ),
            Reason::NotElected => (
                "this connector was not the elected broker; StoreFront should try the next one",
                "none if a later attempt succeeded; otherwise check peer probes between \
                 connectors (port 80) and StoreFront's controller list",
            ),
            Reason::ConnectorStopped => (
                "the connector was down",
                "start the connector; StoreFront tries the next controller meanwhile",
            ),
            Reason::UnknownResource => (
                "the resource is not in this broker's configuration",
                "publish the resource, or wait for the next config sync (a failed import \
                 keeps the older version)",
            ),
            Reason::NotEntitled => (
                "the user is not entitled to the resource",
                "add the user or one of their groups to the resource's entitlement",
            ),
            Reason::CrossZone => (
                "in LHC mode a connector brokers only its own zone, and the resource has no \
                 machine there",
                "add machines of the resource's delivery group in this zone",
            ),
            Reason::NoRegisteredMachine => (
                "no machine of the resource was registered with the broker",
                "check VDA registration (ListOfDDCs includes this zone's connectors) and \
                 maintenance mode",
            ),
            Reason::MachineCapacity => (
                "every candidate machine was full",
                "add machines or raise the session limit of the delivery group's machines",
            ),
            Reason::AssignmentRequired => (
                "a static desktop needs an assignment, and none can be made in LHC mode",
                "assign the machine to the user before an outage (Add-BrokerUser \
                 -PrivateDesktop)",
            ),
            Reason::PooledUnavailableInOutage => (
                "pooled desktops are not reused in an outage unless both reuse settings allow it",
                "Set-BrokerSite -ReuseMachinesWithoutShutdownInOutageAllowed $true; \
                 Set-BrokerDesktopGroup -Name <group> -ReuseMachinesWithoutShutdownInOutage $true",
            ),
            Reason::SessionLimit => (
                "the user already held as many sessions as the delivery group allows",
                "end an old session, or raise the group's session limit per user",
            ),
            Reason::TagRestriction => (
                "no registered machine carried the tag the resource requires",
                "register tagged machines, or relax the tag restriction",
            ),
            Reason::UnknownMachine => (
                "the machine is not in the connector's LHC database",
                "wait for the next successful config sync, or fix the 505 that blocks it",
            ),
        }
    }
}
