"""The demo's fixed texts, ids and questions (``ragport.demo.run``)."""

from __future__ import annotations

DEMO_SCHEMA = "ragport_demo"
DEMO_CORPUS = "demo"
FOLDER_CORPUS = "demo-folder"

DEMO_QUESTIONS = (
    "How often are the brakes of a truck inspected?",
    "How are business trips in a private car reimbursed?",
    "How often is a forklift licence renewed?",
)

# Step 4: the leave policy's new version changes one figure; the old one must vanish.
REPLACED = "leave-policy.md"
OLD_PHRASE = "16 weeks"
NEW_PHRASE = "20 weeks"
REPLACE_QUERY = "How many weeks of parental leave at full pay?"

# Step 5: everyone is in group staff; the security guide is for group security only.
PRINCIPAL = "dana"
GROUP = "staff"
DENIED = "security-guide.md"
DENIED_QUERY = "Who has to approve a payment above 10,000 EUR?"

# Step 6: a derived summary of the onboarding guide, resting on it.
FORGOTTEN = "onboarding.md"
SUMMARY_ID = "summary:onboarding.md"
SUMMARY = (
    "Summary of the onboarding guide: on the first day collect the laptop at 09:00 and set "
    "up the password manager; in the first week shadow two dispatcher shifts and book the "
    "warehouse safety course; in the first month agree on goals with your manager."
)
FORGET_QUERY = "What happens in the first week of onboarding?"

# Step 8: the folder before the changes (file name -> Markdown).
FOLDER_FILES = {
    "depot-hours.md": "# Depot hours\n\nThe north depot opens at 05:30 and closes at 22:00.\n",
    "parking.md": "# Parking\n\nStaff park behind building C; the front yard is for trucks.\n",
    "canteen.md": "# Canteen\n\nThe canteen serves hot meals from 11:30 to 14:00.\n",
    "visitors.md": "# Visitors\n\nVisitors sign in at reception and wear a visitor badge.\n",
}
EDITED, RENAMED, RENAMED_TO, DELETED_FILE = (
    "depot-hours.md",
    "parking.md",
    "parking-and-charging.md",
    "canteen.md",
)
