//! Pure rendering: a plan share → the Kubernetes objects that serve it, per profile.
