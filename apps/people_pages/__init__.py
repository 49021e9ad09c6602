"""The door of people who are not signed in yet: sign up (with e-mail verification), sign in, sign out and
password reset, as pages. What they change is the accounts and workspaces apps' to do."""
