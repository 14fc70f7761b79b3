//! AWS load balancers as alias targets: a cluster whose ingress is an AWS load balancer
//! host name gets an `A` alias record to it (free queries, the load balancer's own health
//! evaluated with `EvaluateTargetHealth`), instead of a CNAME.
//!
//! An alias target needs the load balancer's canonical hosted zone id, which depends on
//! the region and the kind of load balancer. The host name tells both:
//! - Application and Classic Load Balancers: `<name>-<id>.<region>.elb.amazonaws.com`
//!   (with `dualstack.` or `internal-` prefixes);
//! - Network Load Balancers: `<name>-<id>.elb.<region>.amazonaws.com`.
//!
//! The ids are AWS's published list, "Elastic Load Balancing endpoints and quotas",
//! <https://docs.aws.amazon.com/general/latest/gr/elb.html> (section "Service endpoints":
//! the "Route 53 Hosted Zone ID" columns for Application/Classic and Network Load
//! Balancers). A host name in a region missing here (a region newer than this table) is
//! published as a CNAME, which still works, without the alias's advantages.

/// (region, Application/Classic Load Balancer zone id, Network Load Balancer zone id).
const ELB_ZONES: &[(&str, &str, &str)] = &[
    ("af-south-1", "Z268VQBMOI5EKX", "Z203XCE67M25HM"),
    ("ap-east-1", "Z3DQVH9N71FHZ0", "Z12Y7K3UBGUAD1"),
    ("ap-northeast-1", "Z14GRHDCWA56QT", "Z31USIVHYNEOWT"),
    ("ap-northeast-2", "ZWKZPGTI48KDX", "ZIBE1TIR4HY56"),
    ("ap-northeast-3", "Z5LXEXXYW11ES", "Z1GWIQ4HH19I5X"),
    ("ap-south-1", "ZP97RAFLXTNZK", "ZVDDRBQ08TROA"),
    (
        "ap-south-2",
        "Z0173938T07WNTVAEPZN",
        "Z0711778386UTO08407HT",
    ),
    ("ap-southeast-1", "Z1LMS91P8CMLE5", "ZKVM4W9LS7TM"),
    ("ap-southeast-2", "Z1GM3OXH4ZPM65", "ZCT6FZBF4DROD"),
    (
        "ap-southeast-3",
        "Z08888821HLRG5A9ZRTER",
        "Z01971771FYVNCOVWJU1G",
    ),
    (
        "ap-southeast-4",
        "Z09517862IB2WZLPXG76F",
        "Z01156963G8MIIL7X90IV",
    ),
    (
        "ap-southeast-5",
        "Z06010284QMVVW7WO5J",
        "Z026317210H9ACVTRO6FB",
    ),
    (
        "ap-southeast-7",
        "Z0390008CMBRTHFGWBCB",
        "Z054363131YWATEMWRG5L",
    ),
    ("ca-central-1", "ZQSVJUPU6J1EY", "Z2EPGBW3API2WT"),
    (
        "ca-west-1",
        "Z06473681N0SF6OS049SD",
        "Z02754302KBB00W2LKWZ9",
    ),
    ("eu-central-1", "Z215JYRZR1TBD5", "Z3F0SRJ5LGBH90"),
    (
        "eu-central-2",
        "Z06391101F2ZOEP8P5EB3",
        "Z02239872DOALSIDCX66S",
    ),
    ("eu-north-1", "Z23TAZ6LKFMNIO", "Z1UDT6IFJ4EJM"),
    ("eu-south-1", "Z3ULH7SSC9OV64", "Z23146JA1KNAFP"),
    (
        "eu-south-2",
        "Z0956581394HF5D5LXGAP",
        "Z1011216NVTVYADP1SSV",
    ),
    ("eu-west-1", "Z32O12XQLNTSW2", "Z2IFOLAFXWLO4F"),
    ("eu-west-2", "ZHURV8PSTC4K8", "ZD4D7Y8KGAS4G"),
    ("eu-west-3", "Z3Q77PNBQS71R4", "Z1CMS0P5QUZ6D5"),
    (
        "il-central-1",
        "Z09170902867EHPV2DABU",
        "Z0313266YDI6ZRHTGQY4",
    ),
    (
        "me-central-1",
        "Z08230872XQRWHG2XF6I",
        "Z00282643NTTLPANJJG2P",
    ),
    ("me-south-1", "ZS929ML54UICD", "Z3QSRYVP46NYYV"),
    (
        "mx-central-1",
        "Z023552324OKD1BB28BH5",
        "Z02031231H3ID6HYJ9A7U",
    ),
    ("sa-east-1", "Z2P70J7HTTTPLU", "ZTK26PT1VY4CU"),
    ("us-east-1", "Z35SXDOTRQ7X7K", "Z26RNL4JYFTOTI"),
    ("us-east-2", "Z3AADJGX6KTTL2", "ZLMOA37VPKANP"),
    ("us-gov-east-1", "Z166TLBEWOO7G0", "Z1ZSMQQ6Q24QQ8"),
    ("us-gov-west-1", "Z33AYJ8TM3BH4J", "ZMG1MZ2THAWF1"),
    ("us-west-1", "Z368ELLRRE2KJ0", "Z24FKFUX50B4VW"),
    ("us-west-2", "Z1H1FL5HABSF5", "Z18D5FSROUN65G"),
];

/// An AWS load balancer as an alias target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElbTarget {
    /// The load balancer's canonical hosted zone id.
    pub hosted_zone_id: &'static str,
    /// The region the host name names.
    pub region: &'static str,
    pub network: bool,
}

/// The alias target of `hostname` when it is an AWS load balancer's host name in a
/// region of the table; `None` for everything else (published as CNAME).
pub fn elb_target(hostname: &str) -> Option<ElbTarget> {
    let host = hostname.trim_end_matches('.').to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let n = labels.len();
    // The load balancer's own label(s) come first: at least one before the region part.
    if n < 5 || labels[n - 2] != "amazonaws" || labels[n - 1] != "com" {
        return None;
    }
    let (region, network) = if labels[n - 3] == "elb" {
        (labels[n - 4], false) // <lb>.<region>.elb.amazonaws.com
    } else if labels[n - 4] == "elb" {
        (labels[n - 3], true) // <lb>.elb.<region>.amazonaws.com
    } else {
        return None;
    };
    ELB_ZONES
        .iter()
        .find(|(r, ..)| *r == region)
        .map(|&(region, alb, nlb)| ElbTarget {
            hosted_zone_id: if network { nlb } else { alb },
            region,
            network,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_balancer_host_names_and_others() {
        let alb = elb_target("k8s-shop-web-1234567890.eu-west-1.elb.amazonaws.com").unwrap();
        assert_eq!(
            (alb.hosted_zone_id, alb.region, alb.network),
            ("Z32O12XQLNTSW2", "eu-west-1", false)
        );
        let dual = elb_target("dualstack.my-lb-1.us-east-1.elb.amazonaws.com.").unwrap();
        assert_eq!(dual.hosted_zone_id, "Z35SXDOTRQ7X7K");
        let nlb = elb_target("k8s-shop-tcp-0123456789abcdef.elb.us-east-2.amazonaws.com").unwrap();
        assert_eq!((nlb.hosted_zone_id, nlb.network), ("ZLMOA37VPKANP", true));
        assert_eq!(elb_target("lb.example.com"), None);
        assert_eq!(elb_target("x.elb.amazonaws.com"), None); // no region
        assert_eq!(elb_target("x.mars-north-1.elb.amazonaws.com"), None); // not in the table
        assert_eq!(elb_target("bucket.s3.eu-west-1.amazonaws.com"), None);
    }

    #[test]
    fn the_table_is_sorted_without_duplicates() {
        assert!(ELB_ZONES.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
