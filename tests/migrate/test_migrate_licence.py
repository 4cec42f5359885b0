"""neuron-migrate: the model's and the dataset's licence, flagged when missing or restricted."""
from migrate_helpers import DEMO_MODEL, write
from neuron_migrate.licence import check


def test_demo_model_licence_from_its_licence_file():
    result = check(DEMO_MODEL, None, None, [])
    assert result["model"] == {"licence": "psf-2.0", "source": "LICENSE-PSF.txt", "status": "permissive"}
    assert result["flags"] == [] and result["dataset"] is None


def test_model_card_front_matter_and_restricted(tmp_path):
    write(tmp_path, "README.md", "---\nlicense: cc-by-nc-4.0\ntags: [x]\n---\n# Model\n")
    result = check(str(tmp_path), None, None, [])
    assert result["model"]["licence"] == "cc-by-nc-4.0" and result["model"]["status"] == "restricted"
    assert result["flags"] == ["model licence restricted: cc-by-nc-4.0 (README.md front matter)"]
    allowed = check(str(tmp_path), None, None, ["CC-BY-NC-4.0"])
    assert allowed["model"]["status"] == "allowed" and allowed["flags"] == []


def test_config_licence_missing_and_dataset(tmp_path):
    config = type("Config", (), {"license": "Apache-2.0"})
    assert check(str(tmp_path), config, None, [])["model"]["status"] == "permissive"
    missing = check(str(tmp_path), None, "cc-by-sa-4.0", [])
    assert missing["model"]["status"] == "missing" and missing["flags"] == ["model licence missing"]
    assert missing["dataset"] == {"licence": "cc-by-sa-4.0", "source": "workload file (licence.dataset)",
                                  "status": "permissive"}
    card = write(tmp_path, "DATASET.md", "---\nlicense: other\n---\n")
    dataset = check(str(tmp_path), None, card, [])["dataset"]
    assert dataset["licence"] == "other" and dataset["status"] == "restricted"


def test_dataset_card_is_read_not_the_files_beside_it(tmp_path):
    write(tmp_path, "README.md", "---\nlicense: mit\n---\n# the team's project\n")
    card = write(tmp_path, "dataset_card.md", "---\nlicense: cc-by-nc-4.0\n---\n# the dataset\n")
    dataset = check(None, None, card, [])["dataset"]
    assert dataset == {"licence": "cc-by-nc-4.0", "source": "dataset_card.md", "status": "restricted"}
    unlabelled = write(tmp_path, "other_card.md", "# a dataset card without a licence\n")
    assert check(None, None, unlabelled, [])["dataset"]["status"] == "missing"  # not the README's mit
