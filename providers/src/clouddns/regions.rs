//! Google Cloud regions and where they are, for geo routing policies.
//!
//! A Cloud DNS geo item's `location` must be a Google Cloud region ("us-east1",
//! "europe-west1", …): Cloud DNS answers a client with the item of the region nearest to
//! it. A cluster on `gcp` names its region in `spec.region`; a cluster anywhere else is
//! placed at the Google Cloud region nearest its coordinates, so that Cloud DNS's
//! nearest-region choice and the embedded server's nearest-cluster choice agree as far as
//! the region grid allows.
//!
//! The coordinates are those of the city Google names for each region (its public
//! "Cloud locations" page), to two decimals: a region's data centres are spread over a
//! metro area, and a hundredth of a degree is about a kilometre.

use crate::regions::RegionTable;

/// (region, latitude, longitude) of every public Google Cloud region.
pub const GCP_REGIONS: RegionTable = RegionTable(&[
    ("africa-south1", -26.20, 28.05),           // Johannesburg
    ("asia-east1", 24.07, 120.54),              // Changhua County, Taiwan
    ("asia-east2", 22.32, 114.17),              // Hong Kong
    ("asia-northeast1", 35.68, 139.69),         // Tokyo
    ("asia-northeast2", 34.69, 135.50),         // Osaka
    ("asia-northeast3", 37.57, 126.98),         // Seoul
    ("asia-south1", 19.08, 72.88),              // Mumbai
    ("asia-south2", 28.61, 77.21),              // Delhi
    ("asia-southeast1", 1.34, 103.71),          // Jurong West, Singapore
    ("asia-southeast2", -6.21, 106.85),         // Jakarta
    ("australia-southeast1", -33.87, 151.21),   // Sydney
    ("australia-southeast2", -37.81, 144.96),   // Melbourne
    ("europe-central2", 52.23, 21.01),          // Warsaw
    ("europe-north1", 60.57, 27.20),            // Hamina, Finland
    ("europe-north2", 59.33, 18.07),            // Stockholm
    ("europe-southwest1", 40.42, -3.70),        // Madrid
    ("europe-west1", 50.45, 3.82),              // St. Ghislain, Belgium
    ("europe-west2", 51.51, -0.13),             // London
    ("europe-west3", 50.11, 8.68),              // Frankfurt
    ("europe-west4", 53.44, 6.83),              // Eemshaven, Netherlands
    ("europe-west6", 47.38, 8.54),              // Zurich
    ("europe-west8", 45.46, 9.19),              // Milan
    ("europe-west9", 48.86, 2.35),              // Paris
    ("europe-west10", 52.52, 13.40),            // Berlin
    ("europe-west12", 45.07, 7.69),             // Turin
    ("me-central1", 25.29, 51.53),              // Doha
    ("me-central2", 26.43, 50.10),              // Dammam
    ("me-west1", 32.09, 34.78),                 // Tel Aviv
    ("northamerica-northeast1", 45.50, -73.57), // Montréal
    ("northamerica-northeast2", 43.65, -79.38), // Toronto
    ("northamerica-south1", 20.59, -100.39),    // Querétaro
    ("southamerica-east1", -23.53, -46.79),     // Osasco (São Paulo)
    ("southamerica-west1", -33.45, -70.67),     // Santiago
    ("us-central1", 41.26, -95.86),             // Council Bluffs, Iowa
    ("us-east1", 33.20, -80.01),                // Moncks Corner, South Carolina
    ("us-east4", 39.04, -77.49),                // Ashburn, Virginia
    ("us-east5", 39.96, -83.00),                // Columbus, Ohio
    ("us-south1", 32.78, -96.80),               // Dallas
    ("us-west1", 45.59, -121.18),               // The Dalles, Oregon
    ("us-west2", 34.05, -118.24),               // Los Angeles
    ("us-west3", 40.76, -111.89),               // Salt Lake City
    ("us-west4", 36.17, -115.14),               // Las Vegas
]);

#[cfg(test)]
mod tests {
    use fedingress_dns::Location;

    use super::*;

    fn at(latitude: f64, longitude: f64) -> Location {
        Location {
            region: String::new(),
            latitude,
            longitude,
        }
    }

    #[test]
    fn nearest_regions_of_well_known_places() {
        // AWS regions' cities land in the Google Cloud region of the same metro area.
        assert_eq!(GCP_REGIONS.nearest(&at(50.11, 8.68)), "europe-west3"); // eu-central-1, Frankfurt
        assert_eq!(GCP_REGIONS.nearest(&at(38.95, -77.45)), "us-east4"); // us-east-1, N. Virginia
        assert_eq!(GCP_REGIONS.nearest(&at(53.35, -6.26)), "europe-west2"); // eu-west-1, Dublin → London
        assert_eq!(
            GCP_REGIONS.nearest(&at(-33.87, 151.21)),
            "australia-southeast1"
        );
        assert_eq!(GCP_REGIONS.nearest(&at(1.29, 103.85)), "asia-southeast1");
    }

    #[test]
    fn every_region_is_its_own_nearest() {
        for &(name, latitude, longitude) in GCP_REGIONS.0 {
            assert_eq!(GCP_REGIONS.nearest(&at(latitude, longitude)), name);
            assert_eq!(
                GCP_REGIONS.location(name).map(|l| l.region),
                Some(name.to_string())
            );
        }
        assert!(GCP_REGIONS.location("mars-north1").is_none());
    }
}
