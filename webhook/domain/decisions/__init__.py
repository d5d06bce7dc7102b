"""The extender's verbs over one snapshot: filter, prioritize (scoring), preempt and bind."""
